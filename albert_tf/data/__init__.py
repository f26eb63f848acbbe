"""What every task's data goes through: record schemas (`records`), TFRecord/Example writing
without TensorFlow (`tfrecord`), the one feature cache (`feature_cache`), reading TFRecords
(`input_pipeline`), batching and trimming (`batching`, `datasets`), and Gutenberg books as
create_pretraining_data's input (`books`). The pretraining-data tool itself is
`albert_tf.pretraining_data`."""
