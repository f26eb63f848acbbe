"""README sentences about behaviour that differs from the original, each beside a check of
that behaviour: the words must say what the code does."""
import inspect
import os
import random
import re

from albert_tf.pretraining_data import online_masking
from albert_tf.pretraining_data.instances import InstanceOptions, InstanceStats, VocabInfo, \
    create_instances_from_document

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _readme() -> str:
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    return re.sub(r"\s+", " ", text)


def test_other_document_draw_can_return_the_current_one():
    """The original's 10-try loop: with one document every try hits it, and it is used anyway."""
    document = [[10 + i, 11 + i] for i in range(0, 40, 2)]
    vocab = VocabInfo(cls_id=1, sep_id=2, mask_id=3, vocab_size=64, is_start=bytes([1]) * 64)
    stats = InstanceStats()
    options = InstanceOptions(max_seq_length=16, max_predictions_per_seq=2, short_seq_prob=0.0,
                              random_next_sentence=True)
    instances = create_instances_from_document([document], 0, options, vocab, random.Random(3), stats)
    assert instances and stats.sop_random_document > 0
    readme = _readme()
    assert "all documents but the current one" not in readme
    assert "redrawn up to 10 times while it is the current one" in readme


def test_online_masking_settings_are_fixed_and_said_so():
    defaults = inspect.signature(online_masking.tf_online_masking).parameters
    assert defaults["ngram"].default == 3 and defaults["favor_shorter_ngram"].default is True
    import albert_tf.pretraining as pretraining

    call = re.search(r"tf_online_masking\((.*?)\)\n", inspect.getsource(pretraining), flags=re.S).group(1)
    assert "ngram" not in call  # the driver passes none of them: the defaults apply
    assert "fixed at that tool's defaults, whatever the data was made with: n-grams of up to 3 words" in _readme()


def test_squad_predict_only_original_failure_and_file_ends():
    readme = _readme()
    assert "waited for new checkpoints forever" not in readme and "predict-only hangs" not in readme
    assert "raised a `TypeError`" in readme
    assert "The end of a file also ends a document (the original continued" in readme
