"""Packaging for albert_tf. The TensorFlow family is pinned together: these
versions are built against each other (tensorflow-text's ops load only into the
matching tensorflow)."""
from setuptools import find_packages, setup

setup(
    name="albert_tf",
    version="0.1.0",
    description="Google's ALBERT on TensorFlow 2 / Keras 2: same flags, files and numbers",
    packages=find_packages(include=["albert_tf", "albert_tf.*"]),
    # The drivers live in albert_tf/drivers; the checkout's top-level scripts only launch
    # them, so installing adds no top-level module beside other packages.
    python_requires=">=3.10",
    install_requires=[
        "tensorflow==2.21.0",
        "tf-keras==2.21.0",
        "tensorflow-text==2.21.1",
        # Exact: versions differ on segmentation ties (0.1.99 and 0.2.0 split "888" as "88 8", 0.2.3 as the
        # original's time did; tests/tokenization/test_full_tokenizer.py checks it).
        "sentencepiece==0.2.3",
        "absl-py>=2.1,<3",
        "numpy>=1.26,<3",
        "safetensors==0.8.0",
        "google-crc32c==1.9.0",
    ],
    extras_require={
        # Runs the .tflite files run_squad.py --export_dir writes (TensorFlow still converts them;
        # tf.lite.Interpreter is deprecated). 2.3.0 installs beside tensorflow 2.21 / numpy 2.4 /
        # protobuf 6.33 with `pip check` clean (it adds only backports.strenum and tqdm).
        "tflite": ["ai-edge-litert==2.3.0"],
        "test": ["pytest>=8", "pytest-xdist>=3.5", "ai-edge-litert==2.3.0"],
        # create_pretraining_data --runner=beam. Pinned beside the TensorFlow family: 2.77 was measured
        # to install with tensorflow 2.21 / tf-keras 2.21 / tensorflow-text 2.21.1 (protobuf 6.33,
        # numpy 2.4) with `pip check` clean (it moves protobuf from 7.x to 6.33, which TensorFlow accepts).
        "beam": ["apache-beam==2.77.0"],
    },
    entry_points={
        "console_scripts": [
            "albert-create-pretraining-data=albert_tf.drivers.create_pretraining_data:run",
            "albert-run-pretraining=albert_tf.drivers.run_pretraining:run",
            "albert-run-classifier=albert_tf.drivers.run_classifier:run",
            "albert-run-squad=albert_tf.drivers.run_squad:run",
            "albert-run-race=albert_tf.drivers.run_race:run",
            "albert-convert-checkpoint=albert_tf.drivers.convert_checkpoint:run",
            "albert-export-model=albert_tf.drivers.export_model:run",
        ]
    },
)
