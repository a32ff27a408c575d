"""Settings, read from the environment (prefix TOOLSCOUT_, nested sections with `__`) or passed explicitly."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal

from dotenv import dotenv_values
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.cluster.settings import ClusterSettings
from service.db.settings import DatabaseSettings
from service.usage.learning_settings import LearningSettings
from service.usage.log_settings import LogSettings

Port = Annotated[int, Field(ge=1, le=65535)]  # a TCP port a setting names (0: one the clients cannot know)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")  # what both logging and uvicorn take


def log_level(value: str) -> str:
    """A log level in any case (`debug`, `INFO`), else the levels there are: `TOOLSCOUT_LOG_LEVEL=verbose` was a
    traceback of the logging module's at `toolscout serve`."""
    if value.lower() not in LOG_LEVELS:
        raise ValueError(f"not a log level: expected one of {', '.join(LOG_LEVELS)}")
    return value.upper()


LogLevel = Annotated[str, AfterValidator(log_level)]  # an alias: the field of that name would hide the check


def http_url(value: str) -> str:
    """An http(s) URL with a host: `127.0.0.1:8765` without its scheme was every CLI command's "does not answer"."""
    scheme, _, rest = value.partition("://")
    if scheme.lower() in ("http", "https") and rest.strip("/"):
        return value
    raise ValueError("expected an http:// or https:// URL, such as http://127.0.0.1:8765")


def url_path(value: str) -> str:
    """A path the front end serves at (`/mcp`): `mcp` was Starlette's assertion, a traceback, at the start."""
    if value.startswith("/"):
        return value
    raise ValueError(f"a path starts with /, such as /{value.lstrip('/') or 'mcp'}")


class Section(BaseModel):
    """A section of the settings: a key it does not define is an error (TOOLSCOUT_POLICY__OPEN_WITHOUT_KEY, a typo,
    would otherwise leave the service on its default without a word)."""

    model_config = ConfigDict(extra="forbid")


class IndexSettings(Section):
    """Vector index backend: `edge` (embedded, default) or `qdrant` (qdrant-client with url or ':memory:')."""

    backend: Literal["edge", "qdrant"] = "edge"
    path: Path | None = None
    url: str | None = None
    api_key: str | None = None
    collection: str = "toolscout_tools"
    # Qdrant server only (ignored by `edge` and ':memory:'): collection layout, query effort and retries.
    shards: int = 1
    replication_factor: int = 1
    write_consistency_factor: int = 1
    on_disk: bool = False  # dense vectors memory-mapped from disk instead of held in RAM
    hnsw_ef: int = 128  # search-time HNSW beam; raised to the candidate limit when that is larger
    retries: int = 3  # attempts after the first on a transient failure, with exponential backoff
    retry_backoff_seconds: float = 0.2
    timeout_seconds: float = 10.0
    # True: one query per text, its per-signal prefetches fused by Qdrant (`fusion`). Off by default: on the dev
    # sets it loses 5-13 points of R@1 to the z-score fusion done here (bench/compare_qdrant_fusion.py); the
    # per-signal HNSW queries go in one batch request either way.
    server_fusion: bool = False
    fusion: Literal["rrf", "dbsf"] = "rrf"


class EmbeddingSettings(Section):
    """The dense embedder; `model` is a sentence-transformers path or `bundled` for the offline MiniLM."""

    model: str = "bundled"
    # `onnx` serves the model through ONNX Runtime (exported once into <data_dir>/models, torch never loaded
    # while serving); `torch` runs sentence-transformers. `onnx_variant` int8 or fp32 (see README).
    backend: Literal["onnx", "torch"] = "onnx"
    onnx_variant: Literal["int8", "fp32"] = "int8"
    models_dir: Path | None = None  # where exported models are cached; default <data_dir>/models
    batch_size: int = 32  # texts per forward pass (also bounded by padded tokens, see indexer/onnx_embedder.py)
    cache_size: int = 4096
    threads: int | None = None  # intra-op threads; None = all cores


class SearchSettings(Section):
    """Fusion weights and candidate pool sizes of the hybrid search."""

    # One configuration for every catalog, tuned on both dev sets (bench/tune_fusion.py); see docs/quality-history.md.
    weight_name: float = 0.10
    weight_description: float = 0.45
    weight_params: float = 0.10
    weight_lexical: float = 0.35
    # Added to a tool whose name leads with a verb the request uses (git_commit for "commit my changes").
    weight_name_verb: float = 0.2
    # Added on top, among a text's three best, when that verb is the one the request (or a part) leads with,
    # framing aside ("commit my staged changes": git_commit, not git_diff_staged). README, How search works.
    weight_lead_verb: float = 1.2
    # Added, among the same three, to the tools that read (get, list, ...) when the request is a question.
    weight_question_read: float = 0.2
    # Added, among the same three, to a tool whose name verb undoes the request's lead (indexer/names.py).
    weight_opposed_verb: float = -1.2
    # Times the z-score of a tool's server document's similarity to the request (server-aware scoring; 0: off).
    weight_server: float = 0.4
    # Hits per signal and text, the pool each signal is z-scored over: 50 did as well as 100 on both dev sets
    # (docs/quality-history.md) and halves the hits converted and fused per query.
    candidates: int = 50
    # Tools a text's one full dense scan (of each tool's `tool` vector, the sum of its field vectors) passes to
    # exact per-field scoring, next to the lexical hits: 100 gave the top k of three full scans on both dev sets
    # (bench/combined_scan.py) at a third of the bytes read.
    pool_candidates: int = 100
    # The same for each part of a split request (its whole text keeps pool_candidates): offline, 50 moved R@5 by
    # +.0004 (MetaTool) and +.0015 (Seal-Tools), and at 100k tools halves the rows a part ranks exactly.
    part_pool_candidates: int = 50
    # Each field's exact cosines are taken to the field vectors minus this share of the catalog's mean field
    # vector (indexer/index/base.py centred_cosines): generic descriptions stop being near every request. 0 = off.
    centre_fields: float = 1.0
    max_k: int = Field(default=50, ge=1)
    default_k: int = 5  # from 1 to max_k (checked after it: fields are validated in this order)
    split_multi_intent: bool = True
    # Subtracted from the fused score a tool gets from one part of a split request (the whole request scores as
    # is): a part that is only a question's framing then wins less often (bench/ideas.py, docs/quality-history.md).
    part_penalty: float = 0.5
    # From this many parts on, a split request's own vector is its parts' vectors' mean (indexer/intents.py)
    # instead of one more embedding of its longest text: a third less embedding for long requests, quality within
    # .001; from 2 parts on it also cost the usage signal's replay on MetaTool R@1 .012 (docs/quality-history.md).
    whole_from_parts: int = 3  # 0 = never
    max_query_chars: int = 8000
    # Values of a search's `servers` and of its `tags` (each list on its own; repeats count once): the index
    # marks each value's rows, so 250,000 repeats of one tag in a 2 MB body held every search 24 s.
    max_filter_values: int = 1000
    # Subtracted from the score of a result whose tool cannot be called now (its server has no connection, or is in
    # backoff or stopped; service/search/availability.py): it moves below available tools of a near score within
    # the k results, never out of them. Chosen on the demo catalog (README, "Availability"). 0 = off.
    unavailable_penalty: float = Field(default=0.0, ge=0.0, le=1.0)


    @field_validator("default_k")
    @classmethod
    def _within_max_k(cls, default_k: int, info: ValidationInfo) -> int:
        max_k = info.data.get("max_k", max(default_k, 1))  # absent when max_k itself was refused
        if not 1 <= default_k <= max_k:
            raise ValueError(f"must be from 1 to max_k ({max_k})")
        return default_k


class ExecutionSettings(Section):
    """Upstream calls: timeouts, result budgets and what the execution log keeps."""

    servers_file: Path | None = None
    demo_servers: bool = True
    timeout_seconds: float = Field(default=30.0, gt=0)
    result_token_budget: int = Field(default=4000, ge=1)
    batch_concurrency: int = Field(default=8, ge=1)
    log_raw_arguments: bool = False
    # "commit": an answered call has its log row committed (group commit, a few ms); "batched": rows are
    # written in the background after the answer (faster, but a crash loses the rows still in memory).
    log_durability: Literal["commit", "batched"] = "commit"
    # Where the demo servers' virtual environment and npm packages go (default ~/.cache/toolscout/upstream).
    toolchain_dir: Path | None = None
    # How long start-up waits for the upstream servers' first connection and sync (the rest go on in the
    # background); a clean shutdown waits this long for the calls in flight.
    startup_wait_seconds: float = Field(default=20.0, ge=0)
    shutdown_grace_seconds: float = Field(default=30.0, ge=0)
    # Reconnection after a crash: exponential backoff between these bounds; idle connections are pinged.
    reconnect_initial_seconds: float = 0.5
    reconnect_max_seconds: float = 30.0
    heartbeat_seconds: float = 30.0
    batch_max_calls: int = Field(default=100, ge=1)
    # Servers added over the API: stdio ones run a command on this machine, so they are refused unless allowed,
    # and then only for the listed executables (names or absolute paths). Servers of the servers file are trusted.
    allow_api_stdio: bool = False
    api_stdio_commands: list[str] = Field(default_factory=list)
    # The environment variables such a server may set (names, exact): any other could make an allowed command run
    # other code (PYTHONWARNINGS with BROWSER, NODE_OPTIONS, LD_PRELOAD, PATH ...).
    api_stdio_env: list[str] = Field(default_factory=list)
    # Internal hosts (names, addresses, CIDR networks; "*": all) reachable anyway (upstream/urls.py) by:
    upstream_allowed_hosts: list[str] = Field(default_factory=list)  # HTTP upstreams added over the API
    egress_allowed_hosts: list[str] = Field(default_factory=list)  # stdio servers behind the egress proxy
    result_ttl_hours: float = Field(default=24.0, gt=0)
    # Results cut to the budget that one caller keeps stored at once; saving another deletes its oldest.
    max_stored_results_per_caller: int = Field(default=100, ge=1)
    # One JSON-RPC message from an upstream server (a result, a tools/list page; an SSE event or a JSON body over
    # HTTP) may be this long: a longer one fails the call it answers and the connection is restarted.
    max_message_bytes: int = Field(default=16_000_000, ge=1_000_000)
    # A server's whole tools/list (every page, as JSON) may be this long; past it the server is not synced.
    max_tools_list_bytes: int = Field(default=64_000_000, ge=1_000_000)
    # And at most this many tools: syncing one costs ~50 KB of memory at its peak, however few bytes it has.
    max_tools_per_server: int = Field(default=5_000, ge=1)
    # /execute keeps resolved tools this long (upstream syncs invalidate them at once); 0 turns the cache off.
    tool_cache_seconds: float = Field(default=5.0, ge=0)


class PolicySettings(Section):
    """API keys, permissions file and rate limits."""

    permissions_file: Path | None = None
    rate_limit_per_minute: float = Field(default=600.0, ge=0)  # per API key (or the open local user); 0 = no limits
    rate_limit_burst: int = Field(default=60, ge=1)
    search_chars_per_token: int = Field(default=1000, ge=0)  # a search: a token per N query chars begun; 0: one
    body_kib_per_token: int = Field(default=64, ge=0)  # a body: a token per N KiB begun, charged unparsed; 0: one
    approval_ttl_seconds: int = Field(default=900, ge=1)
    # Approvals one caller may have waiting at once: past it a destructive call with new arguments is a 429.
    max_pending_approvals: int = Field(default=20, ge=1)
    # With no API key in the database the service serves one local admin; False refuses every request instead.
    open_without_keys: bool = True
    # How long a resolved key stays cached in the process (a revocation by another process waits this long).
    key_cache_seconds: float = Field(default=5.0, ge=0)
    # An approver may grant their own call only if this is set (the open local user always may).
    allow_self_approval: bool = False
    # Host header names the REST API answers to, besides the bound address, localhost names and IP literals
    # ("*" for any; ".example.com" for a domain and its subdomains). Other hosts get 421 (DNS rebinding).
    allowed_hosts: list[str] = Field(default_factory=list)
    # Browser origins allowed to call the API (CORS); empty keeps CORS off and refuses cross-origin requests.
    cors_origins: list[str] = Field(default_factory=list)
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Proxies (addresses, networks such as 10.0.0.0/8, or * for any peer) whose X-Forwarded-For "
        "names the client, for the REST API and the MCP front end over HTTP; empty: the client is the TCP peer",
    )
    max_body_bytes: int = Field(default=20_000_000, ge=1)  # bodies above it get 413 (registrations: POST /tools)
    # Every other body (calls, searches, scripts): parsing small JSON values costs the event loop ~1 s a MB.
    max_call_body_bytes: int = Field(default=2_000_000, ge=1)
    # tools in one POST /tools (the CLI sends big catalogs in parts)
    max_tools_per_registration: int = Field(default=5_000, ge=1)
    hold_suspicious_tools: bool = True  # hold tools bearing a poisoning signature; hold_changed_tools: upstream
    hold_changed_tools: bool = True  # tools whose definition changed since their first listing (rug pulls)
    screen_results: bool = True  # invisible characters left out of tool results, text addressed to models flagged
    # Failed authentications per client address: this many in a row are free, then each waits twice as long.
    auth_failures_free: int = Field(default=5, ge=0)
    auth_failure_max_delay_seconds: float = Field(default=300.0, ge=0)
    # GET /events streams one key (or the open local user) holds open at once; each front end keeps one.
    max_event_streams_per_key: int = Field(default=16, ge=1)

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses_or_networks(cls, proxies: list[str]) -> list[str]:
        for proxy in proxies:
            if proxy != "*":
                try:
                    ipaddress.ip_network(proxy, strict=False)
                except ValueError:
                    raise ValueError(f"{proxy!r} is not an IP address, a network (10.0.0.0/8) or *") from None
        return proxies


class ConsoleSettings(Section):
    """The web console's sign-in: server-side sessions that stand for an API key behind an HttpOnly cookie.

    The pasted key is exchanged once for a session whose random id is the cookie (policy/console_sessions.py)."""

    # A session ends after this long without a request, and this long after its sign-in in any case.
    session_idle_seconds: float = 1800.0
    session_max_seconds: float = 28800.0
    max_sessions_per_key: int = Field(default=20, ge=1)  # at once; a sign-in past this ends the key's oldest
    # The cookie's Secure flag: "auto" sets it when the sign-in came over https (as uvicorn sees it: behind a
    # proxy that terminates TLS, list it in policy.trusted_proxies for its X-Forwarded-Proto, or choose "always").
    cookie_secure: Literal["auto", "always", "never"] = "auto"


class FrontendSettings(Section):
    """The MCP front end: which REST API it calls and how."""

    api_url: Annotated[str, AfterValidator(http_url)] = "http://127.0.0.1:8765"
    api_key: str | None = None
    profiles_file: Path | None = None
    dynamic_max_active: int = 64
    dynamic_idle_seconds: int = 1800
    dynamic_max_sessions: int = 1000  # dynamic-mode activation sets kept at once (least recently used go first)
    # Several front-end instances behind one balancer share dynamic-mode sessions here (default: cluster.redis_url).
    redis_url: str | None = None
    request_timeout_seconds: float = 120.0  # one REST call; above the execution timeout so the API answers first
    events_retry_seconds: float = 2.0  # first wait before reconnecting to GET /events (doubles up to 60 s)
    http_host: str = "127.0.0.1"  # `toolscout mcp --transport http` listens here
    http_port: Port = 8766
    http_path: Annotated[str, AfterValidator(url_path)] = "/mcp"
    # When set, `toolscout mcp --transport http` requires `Authorization: Bearer <this key>` on every request.
    http_api_key: str | None = None
    # Sessions (and 2026 listen streams, at most 1,024 in all) per client address and in all; past either bound a new
    # one first ends another (the client's least recently used idle one; in all: that of the client holding the most).
    http_max_sessions_per_client: int = Field(default=64, ge=1)
    http_max_sessions: int = Field(default=10_000, ge=1)
    run_script: bool = True  # offer the run_script meta-tool (code mode over POST /run) in every mode


class CodeModeSettings(Section):
    """Code mode (POST /run, the run_script meta-tool): budgets of one JavaScript program calling many tools."""

    enabled: bool = True
    timeout_seconds: float = Field(default=60.0, gt=0)  # wall clock of one script; a request may ask for less, not more
    memory_mib: int = Field(default=256, ge=1)  # the engine's heap
    # The engine process's address space (RLIMIT_AS): the interpreter and QuickJS (~90 MiB of it at rest, mostly
    # reserved, not resident), the heap above, and the values crossing into Python, which the heap does not count.
    # Below ~100 MiB QuickJS cannot even parse its prelude (its out-of-memory then reads as a SyntaxError).
    process_memory_mib: int = Field(default=1024, ge=256)
    max_tool_calls: int = Field(default=50, ge=1)  # tool calls and searches of one script
    max_concurrent: int = Field(default=4, ge=1)  # scripts running at once; the others wait in turn
    # scripts waiting for a turn; past it a run is refused (503) rather than queued
    max_queued: int = Field(default=16, ge=0)
    # Scripts of one caller running or waiting at once; past it its next one is a 429: one caller can neither fill
    # the queue nor hold every slot (at the defaults one stays free for the others).
    max_per_caller: int = Field(default=3, ge=1)
    max_script_chars: int = Field(default=100_000, ge=1)
    # JSON of the script's return value and of each call's arguments
    max_value_chars: int = Field(default=1_000_000, ge=1)
    max_log_lines: int = Field(default=100, ge=0)
    max_log_line_chars: int = Field(default=1000, ge=1)
    # The engine process's scheduling niceness (0-19): scripts are CPU a caller spends on the service's machine,
    # and at 0 one caller's three busy loops held every other caller's searches about 4 times as long.
    niceness: int = Field(default=19, ge=0, le=19)


class ObservabilitySettings(Section):
    """Metrics labels (traces are configured by the standard OTEL_* variables)."""

    # A caller label on the execution metrics: one series per caller, so only for a bounded set of callers.
    metrics_caller_label: bool = False


class Settings(BaseSettings):
    """All Toolscout settings; every field has a working default."""

    model_config = SettingsConfigDict(
        env_prefix="TOOLSCOUT_", env_nested_delimiter="__", env_file=".env", extra="ignore"
    )

    data_dir: Path = Path(".toolscout")
    host: str = "127.0.0.1"
    port: Port = 8765
    log_level: LogLevel = Field(
        default="INFO",
        description="Log level of `toolscout serve` (`toolscout --log-level` overrides it; other commands: WARNING)",
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="json: one JSON line per log record and per request"
    )
    demo_catalog: bool = Field(
        default=True, description="Index eight real MCP servers' tool lists in an empty catalog (with no servers file)"
    )
    # Swagger UI (/docs) and ReDoc (/redoc) load their scripts from a CDN at a floating version onto the API's
    # origin, where any script acts with the console's session: off unless asked (/openapi.json is always there).
    docs_ui: bool = Field(default=False, description="Serve /docs and /redoc (their scripts come from a CDN)")
    db: DatabaseSettings = Field(default_factory=DatabaseSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    execution: ExecutionSettings = Field(default_factory=ExecutionSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    learning: LearningSettings = Field(default_factory=LearningSettings)
    logs: LogSettings = Field(default_factory=LogSettings)
    frontend: FrontendSettings = Field(default_factory=FrontendSettings)
    code_mode: CodeModeSettings = Field(default_factory=CodeModeSettings)
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)

    @model_validator(mode="after")
    def _no_unknown_sections(self) -> Settings:
        """A TOOLSCOUT_ variable with a section (`__`), in the environment or .env, names one of the sections
        (TOOLSCOUT_POLCY__... is a typo)."""
        sections = {
            name
            for name, field in type(self).model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        }
        variables = set(os.environ)
        env_file = type(self).model_config.get("env_file")
        if isinstance(env_file, str) and Path(env_file).is_file():
            variables |= set(dotenv_values(env_file))
        for variable in sorted(variables):
            if variable.upper().startswith("TOOLSCOUT_") and "__" in variable:
                section = variable[len("TOOLSCOUT_") :].split("__")[0].lower()
                if section not in sections:
                    raise ValueError(
                        f"{variable}: no settings section {section!r} (sections: {', '.join(sorted(sections))})"
                    )
        return self

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL: the configured one, or a SQLite file in the data folder."""
        return self.db.url or f"sqlite:///{(self.data_dir / 'toolscout.db').resolve()}"

    @property
    def models_dir(self) -> Path:
        """Where exported embedding models are cached."""
        return self.embedding.models_dir or self.data_dir / "models"

    @property
    def index_path(self) -> Path:
        """Where the embedded index lives."""
        return self.index.path or self.data_dir / "index"
