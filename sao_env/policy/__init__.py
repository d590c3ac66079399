"""Policies: model factory, character tokenizer, sampling with log-probabilities, warm start."""
