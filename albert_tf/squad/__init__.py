"""SQuAD 1.1 / 2.0 for ALBERT: reading, alignment and features, Keras heads,
post-processing, the official-equivalent evaluator, and the run_squad pipeline.

Modules (imported on demand; ``data`` and ``evaluate`` need no TensorFlow):
  data         reading SQuAD JSON into examples, with errors naming the question id
  evaluate     exact match / F1 exactly as the official SQuAD 1.1 and 2.0 scripts
  features     SentencePiece alignment, doc windows, max context, p_mask, labels
  records      TFRecord + JSON side-file cache of features
  heads        Keras heads (1.1 linear span head, 2.0 XLNet-style head) and losses
  postprocess  n-best spans, predictions.json / nbest_predictions.json / null_odds.json
  task         SQuAD as a finetuning.FineTuningTask: model selection, answers, eval_results.txt
"""
