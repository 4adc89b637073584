"""Tool calls: `tools` and `tool_choice` in, `message.tool_calls` out (OpenAI's function calling).

The tools reach the model through its own chat template (the `tools` variable transformers passes
to it), and its answer is read back in the format that template teaches: Hermes' / Qwen2.5's
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (or, as Qwen2.5-Coder often
answers, that object alone as the whole answer, bare or in a ```json block), or Llama 3.x's bare
`{"name": ..., "parameters": {...}}`. A template that does not read `tools` gets them described in
a system message, in the Hermes format. With `tool_choice` "required" or a named function the
answer is constrained (engine/grammar.py) to calls whose arguments follow each function's schema;
"auto" lets the model choose; "none" renders no tools.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from tfcli.engine.grammar import JSON_OPTIONS, MAPS, VALUES, prepared_schema

from .errors import bad, quoted

MAX_TOOLS = 128  # OpenAI's limit on one request's tools
CHOICES = ("auto", "none", "required")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # OpenAI's function names
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_FENCED = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)  # a Markdown code block, the whole answer
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}  # a function without any


@dataclass
class Tools:
    functions: list[dict]  # {"name", "description"?, "parameters"?} as given
    choice: str  # "auto", "required", or a function's name ("none" is no Tools at all)
    style: str  # "hermes" (<tool_call> blocks) or "llama" (the call as a bare JSON object)
    in_template: bool  # the template reads `tools`; else they are described in a system message

    @property
    def forced(self) -> bool:
        return self.choice != "auto"

    def grammar(self, tag=json.dumps) -> str:
        """A Lark grammar (llguidance's, with %json) of the calls tool_choice requires; `tag` writes a
        tag as a rule (engine/grammar.py's tag_rule: the text, or the special token it is)."""
        names = [f["name"] for f in self.functions] if self.choice == "required" else [self.choice]
        key = "parameters" if self.style == "llama" else "arguments"
        calls = [
            {
                "type": "object",
                "properties": {"name": {"const": n}, key: self._schema(n, f"#/anyOf/{i}/properties/{key}")},
                "required": ["name", key],
                "additionalProperties": False,
            }
            for i, n in enumerate(names)
        ]
        schema = json.dumps({"anyOf": calls, "x-guidance": JSON_OPTIONS})
        if self.style == "llama":
            return f"start: call\ncall: %json {schema}\n"
        return f'start: {tag("<tool_call>")} "\\n" call "\\n" {tag("</tool_call>")}\ncall: %json {schema}\n'

    def _schema(self, name: str, where: str) -> dict:
        """The function's parameters as compiled (engine/grammar.py's prepared_schema), its own
        pointers ("#/$defs/Item", as pydantic writes them) rebased to `where` in the whole grammar."""
        return _rebased(prepared_schema(self.parameters(name)), where)

    def parameters(self, name: str) -> dict:
        """The function's parameters schema as given (an empty object when it has none)."""
        params = next(f for f in self.functions if f["name"] == name).get("parameters")
        return params if isinstance(params, dict) and params else NO_PARAMETERS

    def parse(self, text: str) -> tuple[str | None, list[dict]]:
        """The answer's text -> (the content left, or None; the calls, OpenAI's shape). A block
        that is not a call of a known function stays in the content."""
        calls, content = [], text
        if self.style == "hermes":
            for m in _HERMES.finditer(text):
                call = self._call(m.group(1))
                if call is not None:
                    calls.append(call)
                    content = content.replace(m.group(0), "", 1)
            if not calls:  # the call without its tags (Qwen2.5-Coder's habit): the whole answer, bare or fenced
                fenced = _FENCED.match(text.strip())
                call = self._call(fenced.group(1) if fenced else text.strip())
                calls, content = ([call], "") if call is not None else ([], content)
        else:
            call = self._call(text.strip())
            if call is not None:
                calls, content = [call], ""
        content = content.strip() if calls else content
        return (content or None) if calls else content, calls

    def _call(self, text: str) -> dict | None:
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if not isinstance(doc, dict) or doc.get("name") not in {f["name"] for f in self.functions}:
            return None
        args = doc.get("arguments", doc.get("parameters", {}))
        if isinstance(args, str):  # some models write the arguments as a JSON string already
            return _call_shape(doc["name"], args)
        return _call_shape(doc["name"], json.dumps(args, ensure_ascii=False))


def _rebased(schema, where: str):
    """The schema with each local "$ref" ("#", "#/$defs/X") pointing under `where` instead of the root:
    the function's schema is one branch of the grammar's (JSON pointers, RFC 6901)."""
    if isinstance(schema, list):
        return [_rebased(v, where) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k in VALUES:
            out[k] = v  # data, not schemas
        elif k in MAPS and isinstance(v, dict):
            out[k] = {name: _rebased(sub, where) for name, sub in v.items()}  # name -> schema
        elif k == "$ref" and isinstance(v, str) and (v == "#" or v.startswith("#/")):
            out[k] = where + v[1:]
        else:
            out[k] = _rebased(v, where)
    return out


def _call_shape(name: str, arguments: str) -> dict:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def tools_of(body: dict, template_source: str) -> Tools | None:
    """The request's tools and tool_choice, checked (400s naming the field); None when no tool may
    be called (none given, or tool_choice "none")."""
    given, choice = body.get("tools"), body.get("tool_choice")
    if given is None:
        if choice not in (None, "none", "auto"):
            raise bad("'tool_choice' needs 'tools'", "tool_choice")
        return None
    if not isinstance(given, list):
        raise bad("'tools' must be a list of {type: function, function: {name, description, parameters}}", "tools")
    if len(given) > MAX_TOOLS:
        raise bad(f"{len(given):,} tools in one request; at most {MAX_TOOLS}", "tools")
    functions = []
    for i, t in enumerate(given):
        f = t.get("function") if isinstance(t, dict) and t.get("type", "function") == "function" else None
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not _NAME.match(f["name"]):
            raise bad(
                f"tools[{i}] must be {{type: function, function: {{name, ...}}}} "
                "with a name of letters, digits, _ . - (at most 64)",
                f"tools[{i}]",
            )
        if f.get("parameters") is not None and not isinstance(f["parameters"], dict):
            raise bad(f"tools[{i}].function.parameters must be a JSON schema object", f"tools[{i}].function.parameters")
        if any(g["name"] == f["name"] for g in functions):
            raise bad(f"two tools are named {quoted(f['name'])}", f"tools[{i}]")
        functions.append(f)
    if not functions:
        return None
    choice = "auto" if choice is None else choice
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
        if not isinstance(name, str) or name not in {f["name"] for f in functions}:
            raise bad(f"'tool_choice' names no tool of this request: {quoted(choice)}", "tool_choice")
        choice = name
    elif choice not in CHOICES:
        raise bad(
            "'tool_choice' must be auto, none, required or {type: function, function: {name}}, "
            f"not {quoted(choice)}",
            "tool_choice",
        )
    if choice == "none":
        return None
    style = "llama" if "<tool_call>" not in template_source and '"parameters"' in template_source else "hermes"
    return Tools(functions, choice, style, in_template="tools" in template_source)


def messages_for_template(messages: list[dict], tools: Tools | None) -> tuple[list[dict], dict]:
    """Checked messages -> (what the template reads, its variables): assistant tool calls with
    their arguments as objects (as transformers' templates expect them), the tools as `tools`, or
    described in a system message for a template that does not read them."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {"name": c["function"]["name"], "arguments": _object(c["function"].get("arguments"))}}
                for c in m["tool_calls"]
            ]
        out.append(m)
    if tools is None:
        return out, {}
    listed = [{"type": "function", "function": f} for f in tools.functions]
    if tools.in_template:
        return out, {"tools": listed}
    note = (
        "You may call these functions. To call one, answer with "
        '<tool_call>{"name": NAME, "arguments": {...}}</tool_call>.\n'
        + "\n".join(json.dumps(t, ensure_ascii=False) for t in listed)
    )
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + note}
    else:
        out.insert(0, {"role": "system", "content": note})
    return out, {}


def _object(arguments):
    """OpenAI's arguments (a JSON string) as the object a template writes with tojson; the string
    as it is when it is not JSON."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments
