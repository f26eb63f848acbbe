"""Record formats and their files: record schemas (`records`), the one feature cache
(`feature_cache`), and pretraining data: the TFRecord feature spec
(`pretraining_features`), the instance algorithm (`pretraining_instances`) and the
streaming, parallel pipeline behind create_pretraining_data.py (`pretraining_pipeline`)."""
