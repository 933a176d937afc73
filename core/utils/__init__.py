"""Small helpers shared by the trainer and the evaluator."""
