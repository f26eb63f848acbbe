"""Record formats and their files: record schemas (`records`), the one feature cache
(`feature_cache`), and pretraining data: the TFRecord feature spec
(`pretraining_features`), the instance algorithm (`pretraining_instances`) and the
streaming, parallel pipeline behind create_pretraining_data.py (`pretraining_pipeline`),
with its parts: the tokenized corpus on disk (`document_store`), the external shuffle
(`external_shuffle`) and TFRecord/Example writing without TensorFlow (`tfrecord`),
and online masking for run_pretraining.py (`online_masking`)."""
