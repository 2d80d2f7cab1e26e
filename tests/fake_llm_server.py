"""A scripted LLM server on 127.0.0.1 for tests: speaks the Anthropic Messages and OpenAI Chat Completions APIs.

The real SDK clients talk to it through their base_url (`server.anthropic_base_url`,
`server.openai_base_url`). Tests queue what it answers, in order, and read back what it received:

    with FakeLLMServer() as server:
        server.add_kernel_reply("num_warps 8 -> 4", new_source)
        server.add_error(429, retry_after="7")
        server.add_reply("no code here")
        ...
        server.requests[0].body["model"]

One scripted reply answers either API; the wire format follows the request path. A request with
nothing left in the queue gets HTTP 400 "no scripted reply left", which the agents turn into an
AgentError at once rather than retrying.

Like a real API, the server can insist on a key (`api_key=`) and know only some models
(`models=`): a wrong key gets HTTP 401 and an unknown model HTTP 404, for every request. The
agents' endpoint check (its system prompt is ENDPOINT_CHECK_SYSTEM) is answered "OK" without
using the script and recorded in `server.checks`; `add_check_error` makes the next check fail.
A scripted reply can also be slow (`delay_s`), as an overloaded server is, or held until a test
sets an event (`hold`: "answer only once the loop has done X", an order, not a speed); it can answer
only requests that contain some text (`match`: one job's questions, by its kernel type). Its usage says
how many of its tokens the prompt cache served or wrote and how many were reasoning, in each API's own
fields (`tokens_cached`, `tokens_cache_write`, `tokens_reasoning`). Each
request records when it arrived and when it was answered (`received_s`, `answered_s`, on
time.monotonic(), which a test in the same process shares).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from autokernel.agents.base import ENDPOINT_CHECK_SYSTEM
from autokernel.agents.reply import format_reply

HOLD_LIMIT_S = 120.0        # a held reply goes anyway after this long, so a test that fails does not hang
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error"}


@dataclass
class ScriptedReply:
    text: str = ""
    truncated: bool = False                 # answer as if the token limit cut the reply
    tokens_in: int = 100                    # every prompt token (OpenAI's prompt_tokens)
    tokens_out: int = 50                    # every completion token, reasoning included
    tokens_cached: int = 0                  # of tokens_in: read from the prompt cache
    tokens_cache_write: int = 0             # of tokens_in: written to it (Anthropic reports these apart)
    tokens_reasoning: int = 0               # of tokens_out: reasoning or thinking
    status: int = 200                       # anything else answers an API error instead of text
    retry_after: str | None = None          # Retry-After header of an error
    delay_s: float = 0.0                    # wait this long before answering
    hold: threading.Event | None = None     # answer only once this is set (HOLD_LIMIT_S at most)
    match: str | None = None                # answer only a request whose body contains this text


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict
    received_s: float = field(default_factory=time.monotonic)
    answered_s: float | None = None         # when its answer was sent (None: not yet, or the client was gone)

    def asks_for(self, text: str) -> bool:
        return text in json.dumps(self.body)


class FakeLLMServer:
    def __init__(self, *, api_key: str | None = None, models: set[str] | None = None):
        self.api_key = api_key
        self.models = models
        self.requests: list[RecordedRequest] = []
        self.checks: list[RecordedRequest] = []
        self._check_errors: deque[ScriptedReply] = deque()
        self._script: deque[ScriptedReply] = deque()
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        # serve_forever looks for shutdown() every poll_interval, 0.5 s by default: half a second idle at the end of
        # every test that stops a server (about 60 in the suite, issue 37). Requests are answered at once either way.
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="fake-llm-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def add(self, reply: ScriptedReply) -> None:
        with self._lock:
            self._script.append(reply)

    def add_reply(self, text: str, **options) -> None:
        """Queue a text reply; options are ScriptedReply fields (truncated, tokens_in, tokens_out)."""
        self.add(ScriptedReply(text=text, **options))

    def add_kernel_reply(self, description: str, kernel_source: str, *, hypothesis: str = "",
                         fix_of: int | None = None, **options) -> None:
        """Queue a well-formed proposal of `kernel_source` (a fix of experiment `fix_of`, if given)."""
        self.add_reply(format_reply(description, kernel_source, hypothesis, fix_of), **options)

    def add_error(self, status: int, *, retry_after: str | None = None, message: str = "scripted error") -> None:
        self.add(ScriptedReply(text=message, status=status, retry_after=retry_after))

    def add_check_error(self, status: int, *, message: str = "scripted check error") -> None:
        """The next endpoint check gets this error."""
        with self._lock:
            self._check_errors.append(ScriptedReply(text=message, status=status))

    @property
    def pending(self) -> int:
        """Scripted replies not yet served."""
        with self._lock:
            return len(self._script)

    def _next(self, request: RecordedRequest) -> ScriptedReply:
        refusal = self._refusal(request)
        with self._lock:
            if _is_check(request):
                self.checks.append(request)
                return refusal or (self._check_errors.popleft() if self._check_errors else ScriptedReply(text="OK"))
            self.requests.append(request)
            if refusal:
                return refusal
            for reply in self._script:
                if reply.match is None or request.asks_for(reply.match):
                    self._script.remove(reply)
                    return reply
        return ScriptedReply(text="fake LLM server: no scripted reply left", status=400)

    def _refusal(self, request: RecordedRequest) -> ScriptedReply | None:
        if self.api_key is not None:
            sent = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
            if sent != self.api_key:
                return ScriptedReply(text="invalid x-api-key", status=401)
        if self.models is not None and request.body.get("model") not in self.models:
            return ScriptedReply(text=f"model: {request.body.get('model')}", status=404)
        return None


def text_of(content) -> str:
    """A message's text, whether the request sent a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or [] if isinstance(block, dict))


def system_of(body: dict) -> str:
    """The system message of a request in either API's format."""
    system = body.get("system") or next((m["content"] for m in body.get("messages", []) if m["role"] == "system"), "")
    return text_of(system)


def _is_check(request: RecordedRequest) -> bool:
    return system_of(request.body) == ENDPOINT_CHECK_SYSTEM


def _handler_for(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            path = self.path.split("?", 1)[0]
            request = RecordedRequest(path, {k.lower(): v for k, v in self.headers.items()}, body)
            if path.endswith("/v1/messages"):
                render = _anthropic_message
            elif path.endswith("/chat/completions"):
                render = _openai_completion
            else:
                return self._send(404, {"error": {"type": "not_found_error", "message": f"no endpoint {path}"}})
            reply = server._next(request)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            if reply.hold is not None:
                reply.hold.wait(HOLD_LIMIT_S)
            if reply.status != 200:
                headers = {"retry-after": reply.retry_after} if reply.retry_after is not None else {}
                return self._send(reply.status, _error_body(render, reply), headers, request)
            self._send(200, render(body, reply), None, request)

        def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None,
                  request: RecordedRequest | None = None):
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                # Noted before the body goes out: once the client has it, a test may read answered_s at once.
                if request is not None:
                    request.answered_s = time.monotonic()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                if request is not None:
                    request.answered_s = None     # the client gave up waiting (a slow reply past its timeout)

        def log_message(self, *args):
            """Quiet: pytest shows the requests through `server.requests` when a test needs them."""

    return Handler


def _anthropic_message(request: dict, reply: ScriptedReply) -> dict:
    return {"id": f"msg_fake_{id(reply):x}", "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": reply.text}], "model": request.get("model", "fake"),
            "stop_reason": "max_tokens" if reply.truncated else "end_turn", "stop_sequence": None,
            # Anthropic's input_tokens leave out what the cache served and what was written to it.
            "usage": {"input_tokens": reply.tokens_in - reply.tokens_cached - reply.tokens_cache_write,
                      "cache_read_input_tokens": reply.tokens_cached,
                      "cache_creation_input_tokens": reply.tokens_cache_write,
                      "output_tokens": reply.tokens_out,
                      "output_tokens_details": {"thinking_tokens": reply.tokens_reasoning}}}


def _openai_completion(request: dict, reply: ScriptedReply) -> dict:
    return {"id": f"chatcmpl-fake-{id(reply):x}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "fake"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text},
                         "finish_reason": "length" if reply.truncated else "stop"}],
            "usage": {"prompt_tokens": reply.tokens_in, "completion_tokens": reply.tokens_out,
                      "total_tokens": reply.tokens_in + reply.tokens_out,
                      "prompt_tokens_details": {"cached_tokens": reply.tokens_cached},
                      "completion_tokens_details": {"reasoning_tokens": reply.tokens_reasoning}}}


def _error_body(render, reply: ScriptedReply) -> dict:
    error_type = _ERROR_TYPES.get(reply.status, "api_error")
    if render is _anthropic_message:
        return {"type": "error", "error": {"type": error_type, "message": reply.text}}
    return {"error": {"message": reply.text, "type": error_type, "param": None, "code": None}}
