"""4.1: the student's ``one_f_one_b`` (criteria 4.1-makespan, 4.1-peak-in-flight, 4.1-arguments)."""
