"""The command-line programs (`python -m binaries.<name>`).

Importing this package first imports TensorFlow with its start-up noise
filtered: TF 2.14's CPU wheel prints "Unable to register cuDNN/cuFFT/cuBLAS
factory", "Could not find cuda drivers" and "Could not find TensorRT" from
C++ at import, on every start of every binary, although nothing is wrong.
While `tensorflow` is imported, file descriptor 2 goes through
`tff_opt.program.stderr_filter` (standard library only): the lines matching
its `NOISE` are dropped and every other line is written back to stderr, in
order. Afterwards only TFF's compilation of a computation is filtered so
(`tff_opt.program.runtime`); later C++ errors and every Python error print
as usual. `TFF_OPT_SHOW_TF_NOISE=1` turns the filter off.

A binary started with SIGINT ignored (a shell's background job, `cmd &`,
and every run such a sweep or claims process launches) gets Python's
Ctrl-C handler back: `binaries.sweep` and `binaries.claims` stop their runs
with SIGINT, which an ignored SIGINT would lose (the run was then killed 30
s later instead of stopping cleanly).

Python's cyclic garbage collector is paused while TensorFlow is imported,
and what the import made is then frozen (`gc.freeze`): TensorFlow and TFF
leave about 600,000 long-lived objects (modules, classes, functions), and
each full collection would re-scan all of them, 0.1 to 0.25 s each time, eight
times (1.1 s) before the first round of an EMNIST-CR run. A binary calls
`freeze_imports()` once its own imports are done, for those that came
after TensorFlow (TFF, tff-opt). Frozen objects are never collected;
import-time objects live as long as the process anyway. The collector
stays on for everything made afterwards.

Stopping: `binaries.train`, `sweep`, `reproduce` and `claims` stop the same
way on Ctrl-C (SIGINT) and on SIGTERM or SIGHUP (a scheduler's, a closed
terminal's), whether the signal reaches the process alone or its whole
process group. `stop_on_signals` makes SIGTERM and SIGHUP raise
`Terminated` in the main thread, a `KeyboardInterrupt`, so that one path
keeps what was finished (`binaries.train` checkpoints its last finished
round; the others stop their runs, which do so) and `exit_interrupted`
prints one line naming the command that resumes, and exits 130 for SIGINT,
128 + the signal's number otherwise. What a half-stopped runtime prints
while the interpreter ends (TFF's remote-value finalizers, asyncio's
abandoned tasks, gRPC's C++ log) says nothing more than that line: the
binary's `__main__` runs under `quiet_after_interrupt`, which drops
everything written to stderr after it.
"""

import contextlib
import difflib
import gc
import logging
import os
import re
import shlex
import signal
import sys
import threading
from typing import NoReturn, Optional, Sequence

from absl import flags as absl_flags

from tff_opt.program import stderr_filter

# Set before TensorFlow is first imported (TFF's worker inherits them):
# C++ INFO/WARNING lines off; TensorFlow's oneDNN kernels unless the
# environment says otherwise (see tff_opt/program/worker_env.py).
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
# gRPC's C++ core logs INFO lines such as "Got goaway ... UNAVAILABLE" when
# a worker stopped by the same Ctrl-C closes its connection; errors stay.
os.environ.setdefault('GRPC_VERBOSITY', 'ERROR')


def _import_tensorflow_quietly() -> None:
  if 'tensorflow' in sys.modules:
    return
  with stderr_filter.filtered():
    _import_tensorflow()


def _import_tensorflow() -> None:
  """`import tensorflow` with the collector paused, then what it made frozen."""
  enabled = gc.isenabled()
  gc.disable()
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    freeze_imports()
    if enabled:
      gc.enable()


def freeze_imports() -> None:
  """Moves every object alive now out of the collector's reach (`gc.freeze`).

  Called by a binary once its imports are done; see the module docstring.
  """
  gc.freeze()


def restore_sigint() -> None:
  """Python's Ctrl-C handler where SIGINT is ignored (see the docstring)."""
  if (threading.current_thread() is threading.main_thread() and
      signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
    signal.signal(signal.SIGINT, signal.default_int_handler)


class Terminated(KeyboardInterrupt):
  """SIGTERM or SIGHUP, raised in the main thread as Ctrl-C is.

  Attributes:
    signum: The signal's number.
    status: The exit status, 128 + `signum` (143 for SIGTERM).
  """

  def __init__(self, signum: int = signal.SIGTERM):
    super().__init__(signum)
    self.signum = signum
    self.status = 128 + signum


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def stop_on_signals() -> dict:
  """SIGTERM and SIGHUP raise `Terminated` in the main thread.

  A signal set to be ignored (`nohup`) stays ignored; any other handler
  (Python's default action, which would end the process with no clean-up,
  or `tff_opt.program.runtime`'s plain exit) is replaced. Outside the main
  thread nothing changes.

  Returns:
    `{signal: previous handler}` for the signals changed, for
    `restore_signals`.
  """
  if threading.current_thread() is not threading.main_thread():
    return {}

  def terminated(signum, frame):
    del frame
    raise Terminated(signum)

  _deliver_swallowed_stops_again()
  previous = {}
  for sig in _STOP_SIGNALS:
    if signal.getsignal(sig) is not signal.SIG_IGN:
      previous[sig] = signal.signal(sig, terminated)
  return previous


_redelivering = False
_RESEND_SECONDS = 0.05


def _deliver_swallowed_stops_again() -> None:
  """Raises again a stop that a callback's "Exception ignored" swallowed.

  A signal's handler runs in whatever Python code the main thread is in.
  When that code is a garbage-collector callback or a `__del__` (JAX
  registers a callback), Python reports the `Terminated` or
  `KeyboardInterrupt` the handler raised as unraisable and goes on: the
  stop is lost, and the run ends later on another error. An
  unraisable-exception hook sends the same signal again instead, from
  another thread 50 ms later (a signal raised while the hook runs would
  run its handler there, swallowed again), so that the handler runs once
  more in the code that follows; if that is a callback too, the same
  happens again.
  """
  global _redelivering
  if _redelivering:
    return
  previous = sys.unraisablehook

  def send_again(signum):
    timer = threading.Timer(_RESEND_SECONDS, os.kill,
                            args=(os.getpid(), signum))
    timer.daemon = True
    timer.start()

  def hook(unraisable):
    error = unraisable.exc_value
    if isinstance(error, Terminated):
      send_again(error.signum)
    elif isinstance(error, KeyboardInterrupt):
      send_again(signal.SIGINT)
    else:
      previous(unraisable)

  sys.unraisablehook = hook
  _redelivering = True


def restore_signals(previous: dict) -> None:
  """Puts back the handlers `stop_on_signals` replaced."""
  for sig, handler in previous.items():
    signal.signal(sig, handler)


def exit_status(error: BaseException) -> int:
  """130 for Ctrl-C, 128 + the signal's number for `Terminated`."""
  return error.status if isinstance(error, Terminated) else 130


_interrupted = threading.Event()
_args: list[str] | None = None  # The binary's arguments (`note_args`).


def note_args(args: Sequence[str]) -> None:
  """Records the binary's arguments, for `resume_command`'s default.

  A binary whose main is given its command line (rather than reading
  `sys.argv`, as its tests call it) records it when it parses it.
  """
  global _args
  _args = list(args)


def resume_command(prog: str, argv: Optional[Sequence[str]] = None,
                   extra: Sequence[str] = ()) -> str:
  """`python -m binaries.<prog> ARGS`, quoted for a shell.

  Args:
    prog: The binary's name.
    argv: Its arguments (by default those `note_args` recorded, else
      `sys.argv[1:]`).
    extra: Flags to add (a default the same command would not find again,
      such as `binaries.train`'s dated --output_dir).
  """
  if argv is None:
    argv = sys.argv[1:] if _args is None else _args
  args = list(argv) + list(extra)
  return shlex.join(['python', '-m', f'binaries.{prog}', *args])


def exit_interrupted(prog: str, error: Optional[BaseException] = None, *,
                     argv: Optional[Sequence[str]] = None, done: str = '',
                     extra: Sequence[str] = ()) -> NoReturn:
  """One line, then exit 130 (Ctrl-C) or 128 + signal (`Terminated`).

  Args:
    prog: The binary's name, first on the line.
    error: The `KeyboardInterrupt` (or `Terminated`) that stopped it.
    argv: The binary's arguments (`resume_command`'s default).
    done: What was kept, for the line (e.g. 'round 7 checkpointed').
    extra: Flags the resume command needs beyond `argv`
      (`resume_command`).
  """
  how = ('stopped by ' + signal.Signals(error.signum).name
         if isinstance(error, Terminated) else 'interrupted')
  kept = f' ({done})' if done else ''
  print(f'{prog}: {how}{kept}; resume with: '
        f'{resume_command(prog, argv, extra)}', file=sys.stderr, flush=True)
  _interrupted.set()
  sys.exit(exit_status(error) if error is not None else 130)


@contextlib.contextmanager
def quiet_after_interrupt():
  """Runs a binary's main; after `exit_interrupted`, stderr goes quiet.

  For `if __name__ == '__main__'` only: once the one line is printed, file
  descriptor 2 goes to /dev/null for the rest of the process, and Python's
  hooks for errors nobody can act on (a finalizer's, a thread's, asyncio's)
  drop them. Those come from a runtime stopped mid-computation (TFF's
  remote values disposed of on a worker that is gone), not from anything
  the run kept.
  """
  try:
    yield
  except SystemExit:
    if _interrupted.is_set():
      _silence_stderr()
    raise
  except KeyboardInterrupt:
    # A second Ctrl-C after the line (or before main could print it).
    _silence_stderr()
    sys.exit(130)


def run_main(prog: str, main, *args) -> None:
  """`main(*args)` as a binary's `__main__`: stopped cleanly by any signal.

  SIGTERM and SIGHUP raise `Terminated` (`stop_on_signals`); a Ctrl-C or
  `Terminated` that `main` lets through ends in `exit_interrupted`'s one
  line; after that line stderr is quiet (`quiet_after_interrupt`).
  """
  with quiet_after_interrupt():
    stop_on_signals()
    try:
      main(*args)
    except KeyboardInterrupt as e:
      exit_interrupted(prog, e)


def flag_error_line(error: Exception, argv: Sequence[str], flag_values,
                    help_hint: str) -> str:
  """One line for absl's `error` parsing `argv` into `flag_values`.

  E.g. `--port=abc: expected an integer in >= 1 and <= 65535.`, or for an
  unknown flag `--prot: no such flag (HELP_HINT). Did you mean --port?`.
  """
  if isinstance(error, absl_flags.UnrecognizedFlagError):
    close = difflib.get_close_matches(error.flagname, list(flag_values), n=3)
    hint = (' Did you mean ' + ' or '.join(f'--{c}' for c in close) + '?'
            if close else '')
    return f'--{error.flagname}: no such flag ({help_hint}).{hint}'
  text = str(error)
  missing = re.fullmatch(r'Missing value for flag -+(\w+)', text)
  if missing:
    return f'--{missing.group(1)}: expected a value (--{missing.group(1)}=...).'
  match = re.match(r'flag --(\w+)=', text)
  if not match or match.group(1) not in flag_values:
    return text.removeprefix('flag ')
  name = match.group(1)
  given, value = _given_by(argv, name, flag_values)
  parser = flag_values[name].parser
  try:
    parser.parse(value)
  except (TypeError, ValueError):
    return f'{_named(given, value, name)}: expected {_expected(parser)}.'
  # The value parses: a validator of its own refused it (its message).
  reason = text.split('\n')[0][match.end():].split(': ', 1)[-1]
  return f'{_named(given, value, name)}: {reason}'


def _named(given: str, value: str | None, name: str) -> str:
  """`--NAME=VALUE`, or `--OLD=VALUE (--NAME)` for an alias of flag NAME."""
  return (f'--{given}={value}' if given == name else
          f'--{given}={value} (--{name})')


def _given_by(argv: Sequence[str], name: str, flag_values
              ) -> tuple[str, str | None]:
  """The spelling of flag `name` that `argv` used, and the text given to it.

  absl reports a value given to an alias (`DEFINE_alias`: `--lam` of
  `--fedcurv_lam`) under the flag it aliases; the line names what was
  typed.
  """
  value = _given_value(argv, name)
  if value is not None:
    return name, value
  for other in flag_values:
    if flag_values[other].help == f'Alias for --{name}.':
      value = _given_value(argv, other)
      if value is not None:
        return other, value
  return name, None


def _given_value(argv: Sequence[str], name: str) -> str | None:
  """The text given to flag `name` in `argv` (the last one), or None."""
  value = None
  for i, arg in enumerate(argv):
    for prefix in (f'--{name}', f'-{name}'):
      if arg.startswith(prefix + '='):
        value = arg[len(prefix) + 1:]
      elif arg == prefix and i + 1 < len(argv):
        value = argv[i + 1]
  return value


def _expected(parser) -> str:
  """What a flag with absl parser `parser` takes, e.g. 'a positive integer'."""
  if isinstance(parser, absl_flags.EnumParser):
    return 'one of ' + ', '.join(parser.enum_values)
  if isinstance(parser, absl_flags.BooleanParser):
    return 'true or false'
  what = parser.syntactic_help or 'a value of the flag\'s kind'
  return what if what.startswith(('a ', 'an ')) else f'a {what}'


def _silence_stderr() -> None:
  sys.unraisablehook = lambda unraisable: None
  threading.excepthook = lambda args: None
  logging.getLogger('asyncio').disabled = True
  with contextlib.suppress(OSError, ValueError, AttributeError):
    sys.stderr.flush()
  try:
    devnull = os.open(os.devnull, os.O_WRONLY)
  except OSError:
    return
  os.dup2(devnull, 2)
  os.close(devnull)


restore_sigint()
_import_tensorflow_quietly()
