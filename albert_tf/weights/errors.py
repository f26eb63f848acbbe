"""The error every checkpoint reader and writer raises for input the user can fix, and how a driver
shows one that lists the weights that do not fit in its one error line."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be found, read or written, or does not fit the model."""


def first_lines(error: Exception) -> str:
    """A `CheckpointError` listing the weights that do not fit (a line per weight, 31 for another model size,
    after a heading ending in ':'; a Hugging Face folder's has none) as one line: its heading and first
    weight, '...' when more follow."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    shown = 2 if lines and lines[0].endswith(":") else 1
    return " ".join(lines[:shown]) + (" ..." if len(lines) > shown else "")


def another_config_line(error: Exception, albert_config_file: str) -> str:
    """`first_lines`, asking whether the checkpoint was written for another config when the error lists
    weights that do not fit (an error of one line, e.g. not an ALBERT checkpoint, is shown as it is)."""
    if len(str(error).strip().splitlines()) == 1:
        return str(error).strip()
    return (f"{first_lines(error)} (was it written for another config than "
            f"--albert_config_file={albert_config_file}?)")
