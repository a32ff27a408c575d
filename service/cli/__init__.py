"""The `toolscout` command. Each command group lives in its own module and registers its subparsers."""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import sys
from typing import NoReturn

from pydantic import ValidationError
from pydantic_settings import SettingsError

from service.cli.settings_values import unparsed_values, without_password
from service.cli.terminal import printable
from service.errors import ToolscoutError

# Each command -> the module whose `register(subparsers)` adds it (with `set_defaults(func=...)`). A command line
# naming one imports that module only: importing all of them (the benchmarks, analytics, the database layer) took
# 1.5-4 s of every `toolscout search` whose search through the API took 15 ms, and of each chat client's start of
# `toolscout mcp`. `toolscout --help`, or a command no module adds, imports them all.
COMMANDS = {
    "serve": "service.cli.core", "index": "service.cli.core", "search": "service.cli.core",
    "eval": "service.cli.evaluate", "bench": "service.cli.bench", "keys": "service.cli.keys",
    "analytics": "service.cli.analytics", "mcp": "service.cli.mcp", "servers": "service.cli.servers",
    "tools": "service.cli.tools", "models": "service.cli.models",
}
COMMAND_MODULES = list(dict.fromkeys(COMMANDS.values()))
_LOG_LEVEL = "--log-level"  # the one option before the command that takes a value


class _Parser(argparse.ArgumentParser):
    """argparse with its refusals on one line (`toolscout mcp --mode x`), not the usage block above them."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {self._said(message)} (see `{self.prog} --help`)\n")

    def _said(self, message: str) -> str:
        """argparse names a missing or unknown command by the attribute it sets (`keys_command`): named as a
        command here, with the commands there are."""
        for action in self._actions:
            if not isinstance(action, argparse._SubParsersAction):
                continue
            commands = list(action.choices)
            if message == f"the following arguments are required: {action.dest}":
                return f"a command is required: {', '.join(commands)}"
            prefix = f"argument {action.dest}: invalid choice: "
            if message.startswith(prefix):
                given = message.removeprefix(prefix).split(" (choose from")[0]
                close = difflib.get_close_matches(given.strip("'"), commands, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                return f"no command {given} ({hint}commands: {', '.join(commands)})"
        return message

    def unrecognized(self, args: argparse.Namespace, extras: list[str]) -> NoReturn:
        """Arguments no parser took, said by the command they were given to (argparse said them at `toolscout`,
        pointing to `toolscout --help`, for `toolscout search --bogus`)."""
        parser: argparse.ArgumentParser = self
        while (sub := next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)) and (
            getattr(args, sub.dest, None) in sub.choices
        ):
            parser = sub.choices[getattr(args, sub.dest)]
        positional = any(not action.option_strings for action in parser._actions)  # `search QUERY`, `index FILE`
        words = positional and any(not extra.startswith("-") for extra in extras)
        hint = " (an argument of several words goes in quotes)" if words else ""
        parser.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


def build_parser(argv: list[str] | None = None) -> _Parser:
    """The whole command line, or (given the arguments) only what the command they name needs."""
    parser = _Parser(prog="toolscout", description="Semantic tool retrieval for LLM agents.")
    parser.add_argument(
        _LOG_LEVEL,
        default=None,
        type=_log_level,
        help="logging level: debug, info, warning, error or critical (default warning; for `serve`, "
        "TOOLSCOUT_LOG_LEVEL: info)",
    )
    parser.add_argument("-V", "--version", action=_PrintVersion)
    subparsers = parser.add_subparsers(dest="command", required=True)
    command = None if argv is None else _command_of(argv)
    if command in COMMANDS:
        modules = [COMMANDS[command]]
    else:  # `toolscout --version` needs none of them: importing them all took 4 s of its 4.1
        modules = [] if argv is not None and {"-V", "--version"} & set(argv) else COMMAND_MODULES
    for name in modules:
        importlib.import_module(name).register(subparsers)
    _describe(parser)
    return parser


class _PrintVersion(argparse.Action):
    """`toolscout --version`: it was "a command is required", exit 2. The version is read only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **_: object) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help="print Toolscout's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        from service import version

        print(f"toolscout {version()}")  # on stdout, as argparse's own --version (its exit message goes to stderr)
        parser.exit(0)


def _log_level(value: str) -> str:
    from service.settings import log_level

    try:
        return log_level(value)
    except ValueError as exc:  # `--log-level verbose` was the logging module's traceback
        raise argparse.ArgumentTypeError(f"{exc}, got {value!r}") from None


def _command_of(argv: list[str]) -> str | None:
    """The command the arguments name (the first word that is not an option or --log-level's value)."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if not word.startswith("-"):
            return word
        if len(word) > 2 and "=" not in word and _LOG_LEVEL.startswith(word):  # argparse takes `--log` too
            next(words, None)
    return None


def _describe(parser: argparse.ArgumentParser) -> None:
    """`toolscout X --help` opens with the line `toolscout --help` lists for X, unless X has a longer text."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, command in action.choices.items():
                command.description = command.description or helps.get(name)
                _describe(command)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["help"]:  # `toolscout help [COMMAND ...]` was "no command 'help'"
        argv = [*argv[1:], "--help"]
    parser = build_parser(argv)
    _option_before_its_command(parser, argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        assert isinstance(parser, _Parser)
        parser.unrecognized(args, extras)
    level = (args.log_level or "WARNING").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Alembic 1.17+ logs each of its built-in plugins at INFO as it is imported: seven lines of every start of
    # `serve` that say nothing of this service.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `toolscout analytics tools | head`: the reader is gone, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        print(settings_problems(exc), file=sys.stderr)
        return 2
    except SettingsError as exc:  # a value pydantic-settings could not even decode (a list not given as JSON)
        from service.settings import Settings

        lines = unparsed_values(Settings) or [f"  {exc}"]
        print("\n".join([SETTINGS_HEADER, *lines]), file=sys.stderr)
        return 2
    except ToolscoutError as exc:  # a command's refusal (a bench's missing data set, an unreachable database)
        return _refused(exc)
    except BaseExceptionGroup as group:  # the same, raised inside a task group (an MCP client's, anyio's)
        error = _only_error(group)
        if error is None:
            raise
        return _refused(error)


def _option_before_its_command(parser: _Parser, argv: list[str]) -> None:
    """`toolscout --port 9000 serve` was told "no command '9000'": an option of a command, given before it."""
    first = argv[0].split("=", 1)[0] if argv else ""
    if not first.startswith("-") or first == "--":
        return
    own = [option for action in parser._actions for option in action.option_strings]
    if not any(option == first or (len(first) > 2 and option.startswith(first)) for option in own):
        parser.error(
            f"{first} is not an option of toolscout itself: options go after their command, as in "
            "`toolscout serve --port 9000`"
        )


def _refused(error: ToolscoutError) -> int:
    print(f"error: {printable(error.detail)}", file=sys.stderr)
    return 1


def _only_error(group: BaseExceptionGroup) -> ToolscoutError | None:  # type: ignore[type-arg]
    """The one ToolscoutError a group (nested or not) holds, if that is all it holds."""
    errors = list(group.exceptions)
    while len(errors) == 1 and isinstance(errors[0], BaseExceptionGroup):
        errors = list(errors[0].exceptions)
    return errors[0] if len(errors) == 1 and isinstance(errors[0], ToolscoutError) else None


SETTINGS_HEADER = "Invalid settings (environment or .env):"


def settings_problems(error: ValidationError) -> str:
    """Invalid settings by the variable that sets each (TOOLSCOUT_SEARCH__DEFAULT_K), not a stack trace."""
    lines = [SETTINGS_HEADER]
    for problem in error.errors():
        if not problem["loc"]:  # a check of the whole: an unknown section
            lines.append("  " + problem["msg"].removeprefix("Value error, "))
            continue
        variable = "TOOLSCOUT_" + "__".join(str(part) for part in problem["loc"]).upper()
        if problem["type"] == "extra_forbidden":
            lines.append(f"  {variable}: no such setting{_closest_setting(problem['loc'])}")
        else:
            given = without_password(problem["input"]) if isinstance(problem["input"], str) else problem["input"]
            lines.append(f"  {variable}: {problem['msg'].removeprefix('Value error, ')} (given: {given!r})")
    return "\n".join(lines)


def _closest_setting(loc: tuple[int | str, ...]) -> str:
    """` (did you mean TOOLSCOUT_POLICY__OPEN_WITHOUT_KEYS?)` for the setting of the section nearest a misspelt one."""
    from service.settings import Settings

    section = Settings.model_fields.get(str(loc[0])) if len(loc) == 2 else None
    names = list(getattr(section.annotation, "model_fields", {})) if section is not None else []
    close = difflib.get_close_matches(str(loc[-1]).lower(), names, n=1)
    return f" (did you mean TOOLSCOUT_{str(loc[0]).upper()}__{close[0].upper()}?)" if close else ""


if __name__ == "__main__":
    sys.exit(main())
