"""4.4: the student's ``train_step`` (criterion 4.4-train-step)."""
