"""Strategy, precision and worker identity (the flags that choose them: ``training.flags``).

``--distribution_strategy``:
- ``one_device``: the first GPU if there is one, else the CPU.
- ``mirrored``: ``--num_gpus`` local GPUs (all when 0 is given and GPUs exist).  On a
  machine without GPUs it uses the logical CPU devices; ``--num_gpus=N`` there splits
  the CPU into N logical devices, which is how tests exercise multi-replica code.
- ``multi_worker_mirrored``: one process per machine, configured by ``TF_CONFIG``
  (see the README section "Multi-worker training").
- ``tpu`` (also implied by ``--use_tpu``): ``TPUClusterResolver`` from
  ``--tpu_name`` (or ``--master``), ``--tpu_zone``, ``--gcp_project``; the client
  connects to the cluster and initializes the TPU system before building the strategy.

``--mixed_precision``: ``none`` (float32), ``bf16`` (Keras ``mixed_bfloat16``) or
``fp16`` (``mixed_float16``; the training loop then wraps the optimizer in a
dynamic ``LossScaleOptimizer``).  Set it before building the model.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import time
from typing import Iterator

import tensorflow as tf
from absl import logging
from tensorflow.python.eager import context

from albert_tf.keras import keras
from albert_tf.run_lock import JobMessages
from albert_tf.training.faults import WorkerLostError, op_error_reason
from albert_tf.training.signals import TrainingInterrupted

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def split_cpu_into_logical_devices(num_devices: int) -> list[str]:
    """Splits the physical CPU into ``num_devices`` logical CPUs; returns their names.

    Must run before TensorFlow initializes its devices (before any op or strategy).
    Calling it again with the same count is harmless.
    """
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if (len(current) if current else 1) != num_devices:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
            )
        except RuntimeError as e:
            raise RuntimeError(
                f"cannot split the CPU into {num_devices} logical devices: TensorFlow has already "
                f"initialized its devices ({e}). Split before creating any tensor or strategy."
            ) from e
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def set_mixed_precision(mixed_precision: str) -> str:
    """Sets the global Keras policy from ``none|bf16|fp16``; returns the policy name."""
    if mixed_precision not in PRECISIONS:
        raise ValueError(
            f"--mixed_precision={mixed_precision!r}: expected one of {', '.join(PRECISIONS)}"
        )
    policy = PRECISIONS[mixed_precision]
    keras.mixed_precision.set_global_policy(policy)
    return policy


def replica_device_type(strategy: tf.distribute.Strategy) -> str:
    """"CPU", "GPU" or "TPU": the kind of device the strategy's replicas run on."""
    return tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type or "CPU"


def one_device_name(gpus: list) -> str:
    """``one_device`` runs on the first GPU when there is one (whatever ``--num_gpus``), else the CPU."""
    return "/gpu:0" if gpus else "/cpu:0"


def create_strategy(
    distribution_strategy: str = "one_device",
    num_gpus: int = 0,
    use_tpu: bool = False,
    tpu_name: str | None = None,
    tpu_zone: str | None = None,
    gcp_project: str | None = None,
    master: str | None = None,
) -> tf.distribute.Strategy:
    """Builds the ``tf.distribute`` strategy the flags ask for (see the module doc)."""
    if use_tpu:
        if distribution_strategy not in ("tpu", "one_device"):
            raise ValueError(
                f"--use_tpu conflicts with --distribution_strategy={distribution_strategy}"
            )
        distribution_strategy = "tpu"
    if distribution_strategy not in STRATEGIES:
        raise ValueError(
            f"--distribution_strategy={distribution_strategy!r}: expected one of {', '.join(STRATEGIES)}"
        )
    if num_gpus < 0:
        raise ValueError(f"--num_gpus must be >= 0, got {num_gpus}")

    if distribution_strategy == "tpu":
        flag = "--use_tpu" if use_tpu else "--distribution_strategy=tpu"
        return _tpu_strategy(tpu_name, tpu_zone, gcp_project, master, flag)

    gpus = tf.config.list_physical_devices("GPU")
    if distribution_strategy == "one_device":
        return tf.distribute.OneDeviceStrategy(one_device_name(gpus))

    if distribution_strategy == "mirrored":
        if gpus:
            count = num_gpus or len(gpus)
            if count > len(gpus):
                raise ValueError(f"--num_gpus={num_gpus} but only {len(gpus)} GPU(s) are visible")
            devices = [f"/gpu:{i}" for i in range(count)]
        else:
            if num_gpus > 1:
                logging.warning("No GPU found: mirroring over %d logical CPU devices.", num_gpus)
                split_cpu_into_logical_devices(num_gpus)
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)

    # multi_worker_mirrored
    if not os.environ.get("TF_CONFIG"):
        logging.warning(
            "--distribution_strategy=multi_worker_mirrored without TF_CONFIG: running as a single worker."
        )
    return tf.distribute.MultiWorkerMirroredStrategy()


# What the resolver and the connection raise when no TPU is reachable (urllib's URLError is an OSError).
_TPU_UNREACHABLE = (ValueError, OSError, RuntimeError, tf.errors.OpError)


def _tpu_strategy(tpu_name, tpu_zone, gcp_project, master, flag: str = "--use_tpu") -> tf.distribute.Strategy:
    # Not runnable on this project's CI machines (no TPU); the calls are the documented TF2 ones.
    tpu = tpu_name or master or ""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu, zone=tpu_zone, project=gcp_project
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except _TPU_UNREACHABLE as e:  # TensorFlow's and urllib's messages name no flag ("<urlopen error ...>")
        reason = " ".join(str(e).split())
        if not tpu:
            raise ValueError(f"{flag} needs --tpu_name (the Cloud TPU's name or grpc://<ip>:8470) or --master; "
                             f"none given and none found ({reason}). On a CPU/GPU machine drop {flag}") from None
        raise ValueError(f"{flag}: cannot reach TPU {tpu!r} ({reason}). Check --tpu_name/--master, --tpu_zone "
                         f"and --gcp_project; on a CPU/GPU machine drop {flag} and --tpu_name") from None
    return tf.distribute.TPUStrategy(resolver)


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """Where this process sits in a (possibly multi-worker) job."""

    num_workers: int
    worker_index: int
    is_chief: bool


def one_hot_embeddings(strategy: tf.distribute.Strategy) -> bool:
    """Whether encoders look embeddings up by a one-hot matmul: on TPUs, as the original's
    drivers did with ``use_one_hot_embeddings=FLAGS.use_tpu`` (TPUs prefer a matmul to a gather)."""
    return isinstance(strategy, tf.distribute.TPUStrategy)


def worker_info(strategy: tf.distribute.Strategy) -> WorkerInfo:
    """Number of workers, this worker's index and whether it writes checkpoints/summaries."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec().as_dict()
        task_type, task_id = resolver.task_type, resolver.task_id or 0
        workers = spec.get("worker", [])
        has_chief = bool(spec.get("chief"))
        num_workers = len(workers) + (1 if has_chief else 0) or 1
        if task_type == "chief":
            return WorkerInfo(num_workers, 0, True)
        index = task_id + (1 if has_chief else 0)
        return WorkerInfo(num_workers, index, not has_chief and task_id == 0)
    return WorkerInfo(1, 0, True)


def make_tf_config(worker_addresses: list[str], index: int) -> str:
    """The TF_CONFIG value for worker ``index`` of a job of ``worker_addresses`` (host:port)."""
    return json.dumps({"cluster": {"worker": list(worker_addresses)}, "task": {"type": "worker", "index": index}})


# How long the chief waits at a job's end for the other workers' processes to exit.
EXIT_WAIT_SECONDS = 60.0
_DONE_KEY = "albert_tf/end_of_job/"  # + a task's "job/index": that task's work is done
_CHIEF_KEY = "albert_tf/chief/"  # + a key of tell_workers: what the chief tells the other workers


@contextlib.contextmanager
def ending_together(strategy: tf.distribute.Strategy) -> Iterator[None]:
    """Runs a job's work; the workers of a multi-worker job then end together, the chief last.

    The chief hosts TensorFlow's coordination service, to which every worker sends heartbeats until its
    process exits. A chief that exited first made another worker's next heartbeat fail (worker 1:
    "Failed to send RPC to coordination service ... Connection refused"), and a worker that exited while
    the chief still evaluated or predicted alone was reported on the chief as crashed ("The following
    tasks are unhealthy"): error records after a job that succeeded. So when its work is done (or stopped
    by a signal, which stops every worker at the same step) each worker waits for the chief's, and the
    chief returns only once the other workers' processes have ended.
    """
    info = worker_info(strategy)
    if info.num_workers <= 1:
        yield
        return
    try:
        yield
    except TrainingInterrupted:
        _end_together(strategy, info)
        raise
    _end_together(strategy, info)


def _end_together(strategy: tf.distribute.Strategy, info: WorkerInfo) -> None:
    own, others = _tasks(strategy.cluster_resolver)
    coordination = context.context()
    if not info.is_chief:
        coordination.set_config_key_value(_DONE_KEY + own, "done")
        (chief, address), = [(task, address) for task, address in others.items() if _is_chief_task(task, others)]
        failed = _wait_for_key(coordination, _DONE_KEY + chief, address)
        if failed:  # the chief's outputs may be incomplete: the job failed
            raise WorkerLostError(f"the chief (/job:{chief.replace('/', '/task:')}) of the multi-worker job "
                                  f"stopped before the job's end ({failed}); its log says why")
        return
    for task, address in others.items():
        failed = _wait_for_key(coordination, _DONE_KEY + task, address)
        if failed:  # this (the chief's) work is done and written: a worker that went first changes nothing
            logging.warning("/job:%s of the multi-worker job ended before the job's end (%s); the chief's work "
                            "is done.", task.replace("/", "/task:"), failed)
    coordination.set_config_key_value(_DONE_KEY + own, "done")
    _wait_until_closed(list(others.values()), EXIT_WAIT_SECONDS)


def tell_workers(key: str, value: str) -> None:
    """The chief of a multi-worker job: ``value`` for ``key`` in the job's coordination service, for its other
    workers (``chiefs_word``). A key told before keeps its first value."""
    try:
        context.context().set_config_key_value(_CHIEF_KEY + key, value)
    except tf.errors.AlreadyExistsError:
        pass


def chiefs_word(key: str) -> str:
    """Another worker of a multi-worker job (``TF_CONFIG``, as ``create_strategy``): the chief's value for ``key``
    (``tell_workers``), waiting for it; ``WorkerLostError`` when the chief's process is gone first."""
    _, others = _tasks(tf.distribute.cluster_resolver.TFConfigClusterResolver())
    (chief, address), = [(task, address) for task, address in others.items() if _is_chief_task(task, others)]
    failed = _wait_for_key(context.context(), _CHIEF_KEY + key, address)
    if failed:
        raise WorkerLostError(f"the chief (/job:{chief.replace('/', '/task:')}) of the multi-worker job stopped "
                              f"before {key} was ready ({failed}); its log says why")
    return context.context().get_config_key_value(_CHIEF_KEY + key)


# What a multi-worker run hands its output_dir_lock (the feature caches' chief and other workers use them).
JOB_MESSAGES = JobMessages(tell_workers, chiefs_word)


def _tasks(resolver) -> tuple[str, dict[str, str]]:
    """This task's "job/index", and {"job/index": "host:port"} of every other task of the job."""
    own = f"{resolver.task_type}/{resolver.task_id or 0}"
    tasks = {f"{job}/{index}": address for job, addresses in resolver.cluster_spec().as_dict().items()
             if job in ("chief", "worker") for index, address in enumerate(addresses)}
    tasks.pop(own, None)
    return own, tasks


def _is_chief_task(task: str, others: dict[str, str]) -> bool:
    """The chief: /job:chief/task:0 when the cluster has one, else /job:worker/task:0 (as ``worker_info``)."""
    return task == "chief/0" or (task == "worker/0" and "chief/0" not in others)


def _wait_for_key(coordination, key: str, address: str) -> str | None:
    """Waits until the coordination service holds ``key``; None, or why the task that sets it is gone. It asks
    every half second, so that a Ctrl-C is taken at once (a call into TensorFlow holds Python's lock)."""
    while True:
        try:
            coordination.get_config_key_value(key, 500)
            return None
        except tf.errors.DeadlineExceededError:
            if not _accepts_connections(address):
                return f"its process at {address} is gone"
        except tf.errors.OpError as e:
            # A process gone is gRPC's "failed to connect ... Connection refused" (UnavailableError): said as above.
            if not _accepts_connections(address):
                return f"its process at {address} is gone"
            return f"{type(e).__name__}: {op_error_reason(e)}"


def _accepts_connections(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):  # refused (the process is gone), unreachable, or not host:port
        return False


def _wait_until_closed(addresses: list[str], timeout: float) -> None:
    """Returns when no address accepts connections (each worker's process has exited), or after ``timeout``."""
    deadline = time.monotonic() + timeout
    pending = list(addresses)
    while pending and time.monotonic() < deadline:
        pending = [address for address in pending if _accepts_connections(address)]
        if pending:
            time.sleep(0.1)
