"""SQuAD 1.1 / 2.0 for ALBERT: reading, alignment and features, Keras heads,
post-processing and the official-equivalent evaluator.

Modules (imported on demand so the evaluator stays free of TensorFlow):
  evaluate     exact match / F1 exactly as the official SQuAD 1.1 and 2.0 scripts
  data         reading SQuAD JSON into examples, with clear errors
  features     SentencePiece alignment, doc windows, p_mask, TFRecord cache
  heads        Keras heads (v1 linear span head, v2 XLNet-style head) and losses
  postprocess  n-best spans, predictions.json / nbest_predictions.json / null_odds.json
"""
