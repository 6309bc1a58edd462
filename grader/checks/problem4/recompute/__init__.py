"""4.3: the student's ``checkpoint_sequential`` and ``CheckpointSegment`` (criteria
4.3-bit-identical, 4.3-stored-activations, 4.3-recompute-count, 4.3-arguments,
4.3-caller-unchanged)."""
