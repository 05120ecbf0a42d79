"""One Bazel `py_test` per test file, each run under pytest."""

def pytest_tests(srcs, deps = [], data = [], overrides = {}):
    """Defines a `py_test` named after each file in `srcs` (minus `.py`).

    Each target runs its file through tests/pytest_main.py, so a new
    tests/test_*.py needs no BUILD change when `srcs` is a glob.

    Args:
      srcs: The test files (tests/test_*.py).
      deps: Libraries every test needs.
      data: Files every test reads.
      overrides: Per-file settings, keyed by file name: `data` and `tags`
        are added to the defaults; `timeout` replaces the default "long"
        (900 s, per shard); `shard_count` splits the file's tests
        round-robin over that many processes.
    """
    for name in overrides:
        if name not in srcs:
            fail("overrides: %s is not among srcs" % name)
    for src in srcs:
        extra = overrides.get(src, {})
        for key in extra:
            if key not in ("data", "tags", "timeout", "shard_count"):
                fail("overrides[%s]: unknown key %s" % (src, key))
        native.py_test(
            name = src[:-len(".py")],
            srcs = [src, "pytest_main.py"],
            main = "pytest_main.py",
            args = ["$(rootpath %s)" % src],
            python_version = "PY3",
            deps = deps,
            data = data + extra.get("data", []),
            tags = extra.get("tags", []),
            timeout = extra.get("timeout", "long"),
            shard_count = extra.get("shard_count", None),
        )
