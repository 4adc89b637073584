"""tfcli chat: talk to a chat model, turn after turn, keeping the KV cache between turns.

At a terminal the line is read through Python's readline (arrow keys, history, Ctrl-R), as the
REPLs people know do; piped lines are read as they come. Lines that start with '/' are commands
(ollama's set: /help, /bye, /clear, /set, /show, /system), never sent to the model.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import Annotated, Optional

import typer

from . import constrain, options
from .lora import Lora, with_lora
from .quantize import Quantize
from .quantize import apply as apply_quantize
from .command import interrupted
from .experiment import AnyModelOption, FeatureOption, ScaleOption, SteerOption, pass_hooks
from .console import err, note, shown, warn
from .generate import TemplateFile, with_template
from .inputs import warned
from .lang import say, zh

DEFAULT_CHAT_MODEL = "smollm2"

ChatModel = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-m",
        help="A chat model: a name (see 'tfcli models') or a model folder with a chat template. Default: "
             f"{DEFAULT_CHAT_MODEL} (pulled on first use).",
        show_default=False,
    ),
]

# The knobs /set accepts: name -> (type, spellings). The names are SamplingParams' fields plus the
# reply length; the spellings are the flags' and llama.cpp's/ollama's.
KNOBS: dict[str, tuple[type, tuple[str, ...]]] = {
    "temperature": (float, ("temp", "t")),
    "top_k": (int, ()),
    "top_p": (float, ()),
    "min_p": (float, ()),
    "repetition_penalty": (float, ("repeat_penalty",)),
    "repeat_last_n": (int, ()),
    "seed": (int, ("s",)),
    "max_tokens": (int, ("n", "num_predict")),
}

COMMANDS = (
    ("/help", "this list (also /?)"),
    ("/bye", "leave (also /exit, /quit, Ctrl-D)"),
    ("/clear", "forget the conversation, keep the system message (also /reset)"),
    ("/system TEXT", "set the system message (alone: show it; '/system -' removes it)"),
    ("/set KNOB VALUE", "change a setting: " + ", ".join(KNOBS)),
    ("/show", "the model and the settings"),
    ("//TEXT", "send a message that starts with '/'"),
)
COMMANDS_ZH = (  # the same list under --lang zh (cli/lang.py)
    ("/help", "这份列表（也可用 /?）"),
    ("/bye", "离开（也可用 /exit、/quit、Ctrl-D）"),
    ("/clear", "忘掉这段对话，保留系统消息（也可用 /reset）"),
    ("/system TEXT", "设置系统消息（单独输入：显示它；'/system -' 删除它）"),
    ("/set KNOB VALUE", "改一个设置：" + ", ".join(KNOBS)),
    ("/show", "模型和当前设置"),
    ("//TEXT", "发送一条以 '/' 开头的消息"),
)


def chat(
    model: ChatModel = None,
    lora: Lora = None,
    system: Annotated[
        Optional[str],
        typer.Option("--system", help="A system message that opens the conversation.", show_default=False),
    ] = None,
    template: TemplateFile = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", help="Longest reply, in tokens.")] = 512,
    temperature: options.Temperature = None,
    top_k: options.TopK = None,
    top_p: options.TopP = None,
    min_p: options.MinP = None,
    repetition_penalty: options.RepetitionPenalty = None,
    repeat_last_n: options.RepeatLastN = None,
    seed: options.Seed = None,
    lookup: Annotated[
        bool,
        typer.Option(
            "--lookup",
            help="Lookup decoding: guess the next tokens from the conversation and check them in one pass; the "
            "same replies, faster when a reply repeats its context.",
        ),
    ] = False,
    json_schema: constrain.JsonSchema = None,
    grammar: constrain.Grammar = None,
    regex: constrain.Regex = None,
    threads: options.Threads = None,
    kv_type: options.KvTypeOption = None,
    quantize: Quantize = None,
    steer: SteerOption = None,
    feature: FeatureOption = None,
    scale: ScaleOption = 4.0,
    any_model: AnyModelOption = False,
    lang: options.LangOption = None,
) -> None:
    """Chat with a model that has a chat template; by default smollm2, pulled on first use.

    Each turn reuses the KV cache of the conversation so far: only the new message is computed.
    At a terminal the arrow keys edit the line and recall earlier ones. Commands: /help, /bye (or
    Ctrl-D) to leave, /clear to start over, /system TEXT, /set temperature 0.5 (and the other
    sampling knobs), /show. Ctrl-C stops a reply. Lines piped on stdin are read as successive
    user messages (and commands).

    Examples:

      tfcli chat

      tfcli chat -m smollm2 --system "Answer in one sentence." -t 0.5

      tfcli chat --regex '(yes|no)[.]'
    """
    from tfcli.engine.generate import check_max_new_tokens

    options.chinese(lang)  # the banner, /help and the notes speak it
    check_max_new_tokens(max_tokens)
    constrain.check_one(json_schema, grammar, regex)
    n_threads = options.apply_threads(threads)
    lm = with_lora(options.load_model(model or DEFAULT_CHAT_MODEL), lora)
    lm = apply_quantize(warned(with_template(lm, template)), quantize)
    options.apply_kv_type(lm, kv_type)
    require_template(lm)
    params = options.sampler(
        lm.generation, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
        repetition_penalty=repetition_penalty, repeat_last_n=repeat_last_n,
        seed=None if seed == -1 else seed,  # -1: random, as generate
    ).params  # fmt: skip
    state = ChatState(
        lm=lm,
        system=system,
        params=params,
        max_tokens=max_tokens,
        lookup=lookup,
        hooks=pass_hooks(lm, None, steer, feature, scale, any_model),
    )
    state.rules = constrain.compiled(lm, json_schema, grammar, regex, lm.chat_eos_ids())  # every reply follows it
    _run(state, n_threads)


def require_template(lm) -> None:
    """Refuse a model that cannot chat, with words about this command (there is no --chat flag here)."""
    from tfcli.engine.errors import UsageError

    if lm.chat is None:
        raise UsageError(
            f"{lm.name} has no chat template, so it cannot chat",
            f"use a chat model such as {DEFAULT_CHAT_MODEL}, the default; or continue text with: tfcli generate -m "
            f"{lm.name}",
        )


@dataclass
class ChatState:
    """What a conversation is: the model, the messages so far, and the settings /set changes."""

    lm: object
    system: str | None
    params: object  # SamplingParams
    max_tokens: int
    history: list[dict[str, str]] = field(default_factory=list)
    sampler: object = None
    lookup: bool = False  # draft replies from the conversation (engine/lookup.py)
    hooks: object = None  # a steering vector at its site in every pass (--steer)
    rules: object = None  # a grammar every reply follows (engine/grammar.py), or None

    def __post_init__(self):
        from tfcli.engine.sampling import Sampler

        self.sampler = Sampler(self.params)

    def set(self, knob: str, value: str) -> str:
        """Change one setting; returns what it now is. Raises UsageError for a bad name or value."""
        from tfcli.engine.errors import UsageError
        from tfcli.engine.sampling import Sampler

        name = knob.lower().lstrip("-").replace("-", "_")
        name = next((k for k, (_, spellings) in KNOBS.items() if name == k or name in spellings), name)
        if name not in KNOBS:
            raise UsageError(f"no setting {knob!r}", f"one of: {', '.join(KNOBS)}")
        kind = KNOBS[name][0]
        if name == "seed" and value.lower() in ("none", "random", "off"):
            number = None
        else:
            try:
                number = kind(value)
            except ValueError:
                raise UsageError(
                    f"{name} takes {'a whole number' if kind is int else 'a number'}, not {value!r}"
                ) from None
        if name == "max_tokens":
            from tfcli.engine.generate import check_max_new_tokens

            check_max_new_tokens(number)
            self.max_tokens = number
            return f"max_tokens = {number}"
        params = replace(self.params, **{name: number})
        params.validate()  # the flags' own checks and messages (UsageError)
        sampler = Sampler(params)
        if name != "seed":
            sampler.rng = self.sampler.rng  # the random stream goes on; only a new seed restarts it
        self.params, self.sampler = params, sampler
        return f"{name} = {_shown(number)}"

    def settings(self) -> list[tuple[str, str]]:
        p = self.params
        lm = self.lm
        return [
            ("model", f"{lm.name} ({lm.config.family}, {lm.config.n_layer} blocks, {lm.config.n_ctx:,}-token context)"),
            ("system", self.system if self.system else "(none)"),
            ("conversation", f"{len(self.history) // 2} turn{'s' if len(self.history) != 2 else ''}"),
            *((k, _shown(getattr(p, k))) for k in KNOBS if k != "max_tokens"),
            ("max_tokens", str(self.max_tokens)),
        ]


def _shown(value) -> str:
    return "random" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _run(state: ChatState, n_threads: int) -> None:
    from tfcli.engine.generate import Session

    interactive = sys.stdin.isatty()
    history_file = _line_editing() if interactive and sys.stdout.isatty() else None
    session = Session(state.lm.model, workers=n_threads, hooks=state.hooks)
    if interactive:
        name, n_ctx = state.lm.name, state.lm.config.n_ctx
        note(say(f"chatting with {name} ({n_ctx:,}-token context); /help lists the commands, /bye or Ctrl-D leaves",
                 f"正在与 {name} 对话（上下文 {n_ctx:,} 个词元）；/help 列出命令，/bye 或 Ctrl-D 离开"), wrap=True)
    try:
        while True:
            user = _read(interactive)
            if user is None:
                break
            line = user.strip()
            if not line:
                continue
            if line.startswith("/") and not line.startswith("//"):
                if _command(state, line) == "leave":
                    break
                continue
            _reply(state, session, user[1:] if line.startswith("//") else user)
    finally:
        if history_file is not None:
            _save_history(history_file)


def _read(interactive: bool) -> str | None:
    """The next line typed or piped; None at the end (Ctrl-D or end of input)."""
    from tfcli.engine.errors import PromptError
    from tfcli.engine.tokenizer import check_utf8

    asked = False  # a Ctrl-C at this prompt already: the next one leaves
    while True:
        try:
            user = input("> " if interactive else "")
            check_utf8(user, "the message")  # bytes that are not UTF-8 arrive from a lenient stdin as lone surrogates
            return user
        except EOFError:
            if interactive:  # Ctrl-D: end the "> " line, so that the shell's prompt starts on its own
                sys.stdout.write("\n")
                sys.stdout.flush()
            return None
        except KeyboardInterrupt:
            if interactive:
                sys.stdout.write("\n")
                sys.stdout.flush()
            if interactive and not asked:
                # As ollama: a Ctrl-C meant for a reply that just ended must not end the conversation.
                asked = True
                note(say("use /bye or Ctrl-D to leave (Ctrl-C again leaves)", "用 /bye 或 Ctrl-D 离开（再按一次 Ctrl-C 也会离开）"))
                continue
            raise interrupted() from None
        except (UnicodeDecodeError, PromptError) as e:  # not UTF-8 (a strict stdin raises the first)
            # The hint of the chat's own input: '-' and argv do not apply to a line read here.
            fix = "set the terminal to UTF-8" if interactive else "convert the input to UTF-8, e.g. with iconv"
            said = (
                e.message
                if isinstance(e, PromptError)
                else f"the message is not valid UTF-8 (byte {e.object[e.start]:#04x})"
            )
            problem = PromptError(said, fix)
            if not interactive:
                raise problem from None
            warn(f"{problem.message}; not sent, type it again")  # a typing slip should not end the conversation


def _command(state: ChatState, line: str) -> str | None:
    """Carry out one /command; 'leave' to end the chat. Feedback goes to stderr, beside the stats."""
    from tfcli.engine.errors import UsageError

    word, _, rest = line.partition(" ")
    word, rest = word.lower(), rest.strip()
    if word in ("/bye", "/exit", "/quit"):
        return "leave"
    if word in ("/help", "/?"):
        _listed(COMMANDS_ZH if zh() else COMMANDS, 16)
    elif word in ("/clear", "/reset"):
        state.history.clear()
        note(say("conversation cleared", "对话已清空"))
    elif word == "/system":
        if not rest:
            note(say(f"system message: {state.system}", f"系统消息：{state.system}") if state.system
                 else say("no system message", "没有系统消息"))
        else:
            state.system = None if rest == "-" else rest
            removed = state.system is None
            note(say("system message removed", "系统消息已删除") if removed
                 else say("system message set; the conversation goes on with it", "系统消息已设置；对话带着它继续"))
    elif word == "/set":
        knob, _, value = rest.partition(" ")
        if not knob or not value.strip():
            warn(f"usage: /set KNOB VALUE, where KNOB is one of {', '.join(KNOBS)}")
        else:
            try:
                note(state.set(knob, value.strip()))
            except UsageError as e:
                warn(e.render({"max_new_tokens": "max_tokens"}) + "; nothing changed")  # /set's knobs are the fields
    elif word == "/show":
        _listed(state.settings(), 19)
    else:
        listed = ", ".join(u.split()[0] for u, _ in COMMANDS)
        warn(say(f"unknown command {word}; not sent to the model. The commands: {listed}",
                 f"未知命令 {word}；没有发给模型。命令有：{listed}"))
    return None


def _listed(rows, name_width: int) -> None:
    """/help and /show: a name, then what it is, wrapped between words under itself when the
    terminal is narrow (cli/layout.py), the name column kept whole."""
    from rich.table import Table

    table = Table.grid(padding=(0, 1), pad_edge=False)
    table.add_column(width=2)
    table.add_column(min_width=name_width, no_wrap=True, style="bold")
    table.add_column(overflow="fold")
    for name, what in rows:
        table.add_row("", shown(name), shown(what))
    err.print(table)


def _reply(state: ChatState, session, user: str) -> None:
    from tfcli.engine.generate import Generation

    from .generate import chat_prompt

    lm = state.lm
    ids = lm.tokenizer.encode(chat_prompt(lm, user, state.system, state.history))
    room = session.capacity - len(ids) + 1
    if room < 2:
        warn(f"the conversation fills the context ({len(ids):,} of {session.capacity:,} tokens); starting over")
        state.history.clear()
        ids = lm.tokenizer.encode(chat_prompt(lm, user, state.system, state.history))
        room = session.capacity - len(ids) + 1
        if room < 2:  # the message alone does not fit: say so, rather than blame a --max-tokens never given
            warn(f"the message is {len(ids):,} tokens with the template; the context holds {session.capacity:,}; not "
                 "sent, send a shorter one")
            return
    from tfcli.engine.lookup import Drafter

    gen = Generation(
        session, lm.tokenizer, ids, state.sampler, min(state.max_tokens, room), eos_ids=lm.chat_eos_ids(),
        lookup=Drafter() if state.lookup else None, constraint=None if state.rules is None else state.rules.start(),
    )  # fmt: skip
    reply: list[str] = []
    try:
        for step in gen:
            if step.text:
                reply.append(step.text)
                sys.stdout.write(step.text)
                sys.stdout.flush()
    except KeyboardInterrupt:
        reply.append(gen.flush())
        sys.stdout.write(reply[-1])
        gen.stats.stop_reason = "interrupted"
    sys.stdout.write("\n")
    sys.stdout.flush()
    s = gen.stats
    if zh():
        from .views.generate import stopped

        err.print(
            f"[dim]新的提示词元 {s.prompt_tokens} 个（共 {len(ids)} 个）· 回复 {s.new_tokens} 个 · 解码 {s.decode_tps:,.1f} tok/s · "
            + (f"查找解码：草拟 {s.drafted} 个，接受 {s.accepted} 个 · " if state.lookup else "") + f"{stopped(s.stop_reason)}[/]",
            soft_wrap=True,
        )
    else:
        err.print(
            f"[dim]{s.prompt_tokens} new prompt tokens (of {len(ids)}) · {s.new_tokens} reply · "
            f"decode {s.decode_tps:,.1f} tok/s · "
            + (f"lookup: {s.accepted} of {s.drafted} drafted tokens accepted · " if state.lookup else "")
            + f"stopped: {s.stop_reason}[/]",
            soft_wrap=True,  # one line whatever the width: scripts read it, and a terminal wraps it itself
        )
    state.history += [{"role": "user", "content": user}, {"role": "assistant", "content": "".join(reply)}]


def _line_editing():
    """Turn on readline's line editing and history for input(); the history file, or None.

    The history is kept in TFCLI_HOME (chat_history), as shells and Python's REPL keep theirs;
    a platform without readline (Windows without pyreadline) simply reads plain lines.
    """
    try:
        import readline
    except ImportError:
        return None
    from tfcli.store.registry import home_dir

    path = home_dir() / "chat_history"
    for line in _history_lines(path):
        readline.add_history(line)
    readline.set_history_length(1000)
    return path


HISTORY_BYTES = 4_000_000  # 1,000 lines of chat; a larger file is not ours to load


def _history_lines(path) -> list[str]:
    """The lines of the history file, read as the store reads its files: a regular file only, no
    link followed, nothing that blocks (a named pipe there would hang the start), bounded. Anything
    else: no history (the chat starts all the same)."""
    from tfcli.engine.errors import TfcliError
    from tfcli.engine.files import read_small

    try:
        data = read_small(path, HISTORY_BYTES, follow=False)
    except TfcliError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return [line for line in lines if line != "_HiStOrY_V2_"][-1000:]  # libedit's first line


def _save_history(path) -> None:
    """readline writes a temporary file beside the history, renamed over it only when the history is
    a regular file or absent: a link, a named pipe or a device there is left untouched (readline
    itself would truncate the file a link points to and change its mode)."""
    import os
    import stat
    import tempfile

    import readline

    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return
    except FileNotFoundError:
        pass
    except OSError:
        return
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".chat_history.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        readline.write_history_file(tmp)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass  # a read-only home: the history is not kept, the chat worked anyway
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
