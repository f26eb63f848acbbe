"""The pretraining-data tool behind create_pretraining_data.py: text in, shuffled TFRecords of
masked instances out, the same bytes from either runner.

Its stages, and the modules both runners share for each:

  stage (shared modules)                          local runner (`pipeline`)   Beam runner (`beam`)
  read, tokenize (`reading`)                      blocks, in `workers`        byte ranges, `beam_io`
  hold the corpus (`document_store`)              token store on disk         records keyed by index
  instances, each pass (`instances`, `masking`)   `workers`                   `beam_stages`: two joins
  shuffle by 64-bit key (`external_shuffle`)      bucket files, `workers`     group by key range
  write shards (`features`: Example encoding)     pieces, `pipeline`          pieces, `beam_io`
  flags, checks, report (`config`, `summary`)     `pipeline`                  `beam`

The local runner is `pipeline` (worker processes in `workers`); the Beam runner is `beam` (stages
in `beam_stages`, files in `beam_io`). Every draw comes from the seed of (pass, document), taken
from `workers`, so the runners agree to the byte. Imports run one way: `options` at the bottom;
then `config`, `masking`, `features`, `document_store`, `external_shuffle`; `reading`,
`instances`, `summary`; `workers`; `pipeline`, `beam_io`, `beam_stages`; `beam` at the top.
`online_masking` reuses `masking` for run_pretraining.py's masks drawn at every step. The record
formats, TFRecord framing and batching that every task uses live in `albert_tf.data`.
"""
