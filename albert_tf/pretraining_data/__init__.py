"""The pretraining-data tool behind create_pretraining_data.py."""
