"""What the reference checkers need from the project's venv (tests/requirements.txt):
torch and transformers, quiet. A machine without them is not set up, which must
fail a test rather than skip it: require() exits EXIT_NOT_SET_UP then."""
import importlib
import sys

EXIT_NOT_SET_UP = 3


def require(script, *extra):
    """Imports torch, transformers and the modules named in extra; returns
    (torch, transformers)."""
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
        for name in extra:
            importlib.import_module(name)
    except ImportError as e:
        print(f"{script}: {sys.executable} lacks torch, transformers or {', '.join(extra) or 'a dependency'} ({e}); "
              "run deploy/install-deps.sh", file=sys.stderr)
        sys.exit(EXIT_NOT_SET_UP)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return torch, transformers


def report(out, names, extra=()):
    """Prints each fixture file's size and the start of its sha256 (the
    files of out/<name>/ for each name, then the files extra names in out),
    so two runs can be compared by eye or with diff."""
    import hashlib
    import os

    files = [os.path.join(name, fn) for name in names for fn in sorted(os.listdir(os.path.join(out, name)))]
    total = 0
    for fn in files + list(extra):
        with open(os.path.join(out, fn), "rb") as f:
            data = f.read()
        total += len(data)
        print(f"{len(data):>9}  {hashlib.sha256(data).hexdigest()[:16]}  {fn}")
    print(f"{total:>9}  total bytes")

