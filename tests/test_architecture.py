"""The shape of the code: imports point down (no cycles), indexer/ stands alone, mcp/ talks REST, small modules.

The import graph is read with `ast` from every module of service/ and indexer/: module-level imports and imports
inside functions count; imports under `if TYPE_CHECKING:` do not (they never run, and they are how a domain
names the `Resources` type that wiring holds it in)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("service", "indexer")
MAX_LINES = 400
MAX_TOP_LEVEL_MODULES = 8
DOMAINS = ("catalog", "search", "upstream", "execution", "policy", "usage", "observability", "console")
# What the MCP front end may import of the service: the REST client side, never a domain package.
# service.security: edge guards (hosts, limits, failed-auth delays) that import only settings and errors.
MCP_MAY_IMPORT = ("service.mcp", "service.errors", "service.settings", "service.http_transport", "service.security")
# cluster/ is two layers: these modules sit under the domains (which call them in their own transactions) ...
CLUSTER_BELOW_DOMAINS = ("bus", "changes", "ratelimit", "state", "vectors", "writers")
CLUSTER_BELOW_MAY_IMPORT = ("service.settings", "service.db", "service.policy.ratelimit")
# ... and these apply other replicas' changes through the domains; only main.py wires them in.
CLUSTER_ABOVE_DOMAINS = ("follower", "servers", "runtime")
# The web console reads analytics (usage) and who the caller is (policy) and serves them through deps.
CONSOLE_MAY_IMPORT = (
    "service.console",
    "service.usage",
    "service.policy",
    "service.deps",
    "service.db",
    "service.security",  # the edge guards, under every domain (the strict JSON body of its sign-in)
)
# The /metrics route and the console are assembled by main.py only.
ONLY_MAIN_IMPORTS = ("service.observability.routes", "service.console")


def within(module: str, packages: tuple[str, ...]) -> bool:
    """Whether module is one of packages or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement below node, skipping the bodies of `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            found += _runtime_imports(ast.Module(body=child.orelse, type_ignores=[]))  # only `else:` runs
        elif isinstance(child, ast.Import | ast.ImportFrom):
            found.append(child)
        else:
            found += _runtime_imports(child)
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules this module imports at run time."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import module` imports the module; `from module import name` the module itself.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_the_graph_sees_the_imports_inside_functions(graph: dict[str, set[str]]) -> None:
    assert "service.search.ranking" in graph["service.search.retrieval"]
    assert "indexer.index.factory" in graph["service.resources"]  # imported inside start_resources


def test_there_are_no_import_cycles(graph: dict[str, set[str]]) -> None:
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_domain_packages_depend_on_each_other_without_cycles(graph: dict[str, set[str]]) -> None:
    """policy <- catalog <- upstream <- execution and policy <- usage <- search, never back; observability
    below search and execution (its routes read the catalog), the console over usage and policy."""
    domains = {f"service.{d}" for d in DOMAINS}

    def domain(module: str) -> str | None:
        package = ".".join(module.split(".")[:2])
        return package if package in domains else None

    packages: dict[str, set[str]] = {d: set() for d in domains}
    for module, targets in graph.items():
        if (source := domain(module)) is not None:
            packages[source] |= {t for t in map(domain, targets) if t is not None and t != source}
    cycle = find_cycle(packages)
    assert cycle is None, "domain cycle: " + " -> ".join(cycle or [])
    assert packages["service.policy"] == set()


def test_the_cycle_finder_reports_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_indexer_never_imports_service(graph: dict[str, set[str]]) -> None:
    wrong = {m: sorted(t for t in ts if t.startswith("service")) for m, ts in graph.items() if m.startswith("indexer")}
    assert {m: ts for m, ts in wrong.items() if ts} == {}


def test_wiring_imports_no_domain_at_run_time(graph: dict[str, set[str]]) -> None:
    """resources.py holds the domains' objects by type only; the domains build them. The supervisor of the
    background loops is wiring too (it knows no domain)."""
    assert sorted(t for t in graph["service.resources"] if t.startswith("service")) == [
        "service.db.engine",
        "service.settings",
        "service.supervisor",
    ]
    assert graph["service.supervisor"] == set()


def test_the_mcp_front_end_talks_to_the_rest_api_only(graph: dict[str, set[str]]) -> None:
    wrong = {
        module: sorted(t for t in targets if t.startswith("service") and not t.startswith(MCP_MAY_IMPORT))
        for module, targets in graph.items()
        if module.startswith("service.mcp")
    }
    assert {m: ts for m, ts in wrong.items() if ts} == {}


def test_the_cluster_state_below_the_domains_imports_no_domain(graph: dict[str, set[str]]) -> None:
    below = {f"service.cluster.{m}" for m in CLUSTER_BELOW_DOMAINS}
    assert below <= set(graph)

    def allowed(target: str) -> bool:
        return not target.startswith("service") or target in below or target.startswith(CLUSTER_BELOW_MAY_IMPORT)

    wrong = {module: sorted(t for t in graph[module] if not allowed(t)) for module in below}
    assert {m: ts for m, ts in wrong.items() if ts} == {}


def test_only_main_wires_the_cluster_modules_above_the_domains(graph: dict[str, set[str]]) -> None:
    above = {f"service.cluster.{m}" for m in CLUSTER_ABOVE_DOMAINS}
    importers = {
        module: sorted(targets & above)
        for module, targets in graph.items()
        if targets & above and not module.startswith("service.cluster")
    }
    assert importers == {"service.main": ["service.cluster.runtime", "service.cluster.servers"]}
def test_the_observability_hooks_import_nothing_of_the_service(graph: dict[str, set[str]]) -> None:
    """stage, span, observe_* and the trace ids are called by wiring (errors.py) and by search and execution,
    so below routes.py observability/ imports only itself; routes.py (the /metrics scrape) reads the catalog."""
    wrong = {
        module: sorted(t for t in targets if t.startswith("service") and not within(t, ("service.observability",)))
        for module, targets in graph.items()
        if within(module, ("service.observability",)) and module != "service.observability.routes"
    }
    assert {m: ts for m, ts in wrong.items() if ts} == {}
    assert "service.observability.routes" not in graph["service.observability"]


def test_the_console_reads_usage_and_policy_only(graph: dict[str, set[str]]) -> None:
    wrong = {
        module: sorted(t for t in targets if t.startswith("service") and not within(t, CONSOLE_MAY_IMPORT))
        for module, targets in graph.items()
        if within(module, ("service.console",))
    }
    assert {m: ts for m, ts in wrong.items() if ts} == {}


def test_only_main_assembles_the_console_and_the_metrics_route(graph: dict[str, set[str]]) -> None:
    importers = {
        module
        for module, targets in graph.items()
        if not within(module, ONLY_MAIN_IMPORTS) and any(within(t, ONLY_MAIN_IMPORTS) for t in targets)
    }
    assert importers == {"service.main"}


def test_no_module_is_over_400_lines() -> None:
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in all_modules().items()}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_service_has_at_most_8_modules_at_its_top_level() -> None:
    top = sorted(p.name for p in (ROOT / "service").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
