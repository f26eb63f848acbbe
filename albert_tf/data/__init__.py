"""Pretraining data: the TFRecord feature spec (`pretraining_features`), the
instance algorithm (`pretraining_instances`) and the streaming, parallel
pipeline behind create_pretraining_data.py (`pretraining_pipeline`)."""
