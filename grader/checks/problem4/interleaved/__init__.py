"""4.2: the student's ``interleaved_one_f_one_b`` (criteria 4.2-interleaved, 4.2-arguments)."""
