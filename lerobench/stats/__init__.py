"""Pure statistics (scipy-backed): intervals, tests, sequential rules, designs. Imports no stage."""
