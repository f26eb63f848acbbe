"""RACE (multiple-choice reading comprehension) for ALBERT, as the original's
`race_utils.py` reads and encodes it.

Modules (pure Python, no TensorFlow):
  data       reading <data_dir>/RACE/<split>/<level>/*.txt into one example per
             question, with errors naming file:line; padding examples
  features   the four `[CLS] article [SEP] question+option [SEP]` inputs of an example
  synthetic  a templated RACE-format data set whose answers are stated in the article
"""
