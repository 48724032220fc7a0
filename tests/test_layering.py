"""The layering rule of docs/ARCHITECTURE.md, enforced on every import of the repository.

Every ``.py`` file of ``copo_core``, ``recipe``, ``data_prep``, ``scripts`` and ``tests`` is parsed
with ``ast``; every import statement counts, those inside functions included. The rule is read from
the document's table ("component | may import"), so the document and the check cannot drift:

1. no import cycle between our modules;
2. each module imports, of our code, only its own component and what its row allows
   (``importlib.import_module("literal")`` counts as an import);
3. nothing imports ``scripts``, and no test loads a script by file path;
4. no module outside ``tests`` imports another module's private (``_``-prefixed) name;
5. no module but ``recipe/tracking/names.py`` spells a metric name (a string starting with one of
   the metric namespaces that names.py defines, such as ``perf/`` or ``actor/``);
6. no module but ``recipe/launch`` builds a run's Hydra override (an f-string ``key={value}``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.paths import REPO

TOPS = ("copo_core", "recipe", "data_prep", "scripts", "tests")
DOC = REPO / "docs" / "ARCHITECTURE.md"
ANY = "any component but `scripts`"  # the may-import cell of scripts and tests


# ----------------------------------------------------------------------------- the import graph
def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of our top-level folders."""
    files = {}
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            files[name] = path
    return files


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _known(name: str, modules: Iterable[str]) -> str | None:
    """The longest prefix of ``name`` that is one of our modules (``a.b.func`` -> ``a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


IMPORTERS = {"import_module", "__import__"}


def _literal_import(node: ast.AST) -> str | None:
    """The module named by ``importlib.import_module("a.b")`` / ``__import__("a.b")`` (a string literal)."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = node.args[0]
    if called in IMPORTERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def import_edges(root: Path) -> dict[str, dict[str, int]]:
    """``{importer: {imported module: line}}`` over our modules: import statements, and
    ``importlib.import_module`` / ``__import__`` calls with a literal name.

    ``from pkg import name`` counts as an import of ``pkg.name`` when that is a module, else of ``pkg``.
    """
    files = module_files(root)
    edges: dict[str, dict[str, int]] = {name: {} for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(name, is_package, node)
                targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
            elif (literal := _literal_import(node)) is not None:
                targets = [literal]
            else:
                continue
            for target in targets:
                known = _known(target, files)
                if known and known != name:
                    edges[name].setdefault(known, node.lineno)
    return edges


def runtime_edges(edges: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    """The explicit edges plus the package ``__init__`` each import runs first (``import a.b.c`` runs
    ``a`` and ``a.b``), except the importer's own enclosing packages: those are already importing."""
    graph = {name: set(targets) for name, targets in edges.items()}
    for name, targets in edges.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in edges and parent not in own and parent != name:
                    graph[name].add(parent)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative): each holds a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


# ----------------------------------------------------------------------------- the rule, from the doc
def layering_table(doc: Path = DOC) -> dict[str, set[str] | None]:
    """``{component: allowed components}`` from the document's "component | may import" table;
    None for ``scripts`` and ``tests`` (any component but ``scripts``)."""
    text = doc.read_text()
    section = text.split("## Layering", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str] | None] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        component = re.findall(r"`([^`]+)`", cells[0])[0]
        allowed = cells[1]
        table[component] = None if allowed == ANY else set(re.findall(r"`([^`]+)`", allowed))
    return table


def component_of(module: str, table: dict[str, set[str] | None]) -> str | None:
    """The most specific component holding ``module`` (a component ``a.b`` holds ``a.b`` and ``a.b.*``)."""
    matches = [c for c in table if module == c or module.startswith(c + ".")]
    return max(matches, key=len) if matches else None


EDGES = import_edges(REPO)
TABLE = layering_table()


def test_the_table_names_real_components_and_is_itself_acyclic() -> None:
    assert {"copo_core", "recipe.copo", "recipe.copo.actor_loss", "scripts", "tests"} <= set(TABLE)
    for component, allowed in TABLE.items():
        assert any(m == component or m.startswith(component + ".") for m in EDGES), (
            f"{component}: no such module"
        )
        for other in allowed or ():
            assert other in TABLE, f"{component} may import {other}, which is not a component of the table"
            assert other != "scripts", f"{component} may not import scripts"
    declared = {c: set(a) if a is not None else set(TABLE) - {"scripts", c} for c, a in TABLE.items()}
    assert import_cycles(declared) == [], "the rule itself must not allow a cycle"


def test_every_module_belongs_to_a_component() -> None:
    """A new package fails here until docs/ARCHITECTURE.md gives it a row."""
    unplaced = [m for m in EDGES if m != "recipe" and component_of(m, TABLE) is None]
    assert not unplaced, "add these to the table in docs/ARCHITECTURE.md: " + ", ".join(unplaced)
    # the bare root package is not a component: it must stay empty (no code, no imports)
    root = ast.parse((REPO / "recipe" / "__init__.py").read_text())
    assert all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in root.body)


def test_every_import_follows_the_layering_rule() -> None:
    wrong = []
    for importer, targets in EDGES.items():
        if importer == "recipe":
            continue
        source = component_of(importer, TABLE)
        allowed = TABLE[source]
        for target, line in targets.items():
            dest = component_of(target, TABLE)
            if dest == source:
                continue
            ok = dest != "scripts" if allowed is None else dest in allowed
            if not ok:
                path = module_files(REPO)[importer].relative_to(REPO)
                wrong.append(f"{path}:{line}: {importer} ({source}) imports {target} ({dest})")
    assert not wrong, "imports that break docs/ARCHITECTURE.md's layering rule:\n" + "\n".join(wrong)


def test_no_import_cycles() -> None:
    assert import_cycles(runtime_edges(EDGES)) == []


def test_the_checks_catch_what_they_check(tmp_path: Path) -> None:
    """The graph, the cycle finder and the rule can fail: a fabricated tree with a cycle, an upward
    arrow (copo_core importing recipe) and a test importing a script."""
    files = {
        "copo_core/__init__.py": "",
        "copo_core/a.py": "from recipe.tracking import names\n",
        "recipe/__init__.py": "",
        "recipe/tracking/names.py": "def f():\n    from recipe.tracking import plots\n",
        "recipe/tracking/plots.py": "from . import names\n",
        "scripts/run.py": "",
        "tests/test_x.py": "import scripts.run\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "data_prep").mkdir()
    edges = import_edges(tmp_path)
    assert edges["copo_core.a"] == {"recipe.tracking.names": 1}
    assert edges["recipe.tracking.names"] == {"recipe.tracking.plots": 2}  # inside a function: counted
    assert import_cycles(runtime_edges(edges)) == [["recipe.tracking.names", "recipe.tracking.plots"]]
    table = {"copo_core": set(), "recipe.tracking": {"copo_core"}, "scripts": None, "tests": None}
    assert component_of("copo_core.a", table) == "copo_core"
    assert component_of("recipe.tracking.names", table) == "recipe.tracking"
    assert "recipe.tracking" not in table["copo_core"]  # the upward arrow above is refused by the rule
    assert component_of(next(iter(edges["tests.test_x"])), table) == "scripts"


# ----------------------------------------------------------------------------- scripts are leaves
def _code_string_nodes(tree: ast.AST) -> list[ast.Constant]:
    """String constants of a module, docstrings left out (f-strings' literal parts included)."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def _code_strings(tree: ast.AST) -> list[str]:
    """String constants of a module, docstrings left out."""
    return [n.value for n in _code_string_nodes(tree)]


LOADERS = {"spec_from_file_location", "run_path", "SourceFileLoader", "load_source"}


def script_loaders(path: Path) -> list[int]:
    """Lines of ``path`` that load a file by path, when the module also spells a path under scripts/
    (directly in the call, or in a constant the call may read: ``CLUSTER = ROOT / "scripts" / ...``)."""
    tree = ast.parse(path.read_text(), str(path))
    mentions_scripts = any(s == "scripts" or s.startswith("scripts/") for s in _code_strings(tree))
    calls = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", ""))
        in LOADERS
    ]
    return calls if mentions_scripts else []


@pytest.mark.parametrize("top", ["tests", "recipe", "copo_core", "data_prep", "scripts"])
def test_nothing_loads_a_script_by_path(top: str) -> None:
    """No ``spec_from_file_location`` / ``run_path`` / ``SourceFileLoader`` of a file under scripts/:
    a test exercises a command line by running it (a subprocess), and a module by importing it."""
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / top).rglob("*.py"))
        if path != Path(__file__)
        for line in script_loaders(path)
    ]
    assert not found, "scripts are command lines, not modules: " + ", ".join(found)


def test_the_script_loader_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "test_bad.py"
    bad.write_text(
        "import importlib.util\nfrom tests.paths import REPO\nSCRIPTS = REPO / 'scripts'\n"
        "spec = importlib.util.spec_from_file_location('x', SCRIPTS / 'x.py')\n"
    )
    assert script_loaders(bad) == [4]
    fine = tmp_path / "test_fine.py"
    fine.write_text(
        '"""Loads recipe/verl_pin.py (see scripts/)."""\nimport importlib.util\n'
        "spec = importlib.util.spec_from_file_location('p', 'recipe/verl_pin.py')\n"
    )
    assert script_loaders(fine) == []


def test_every_folder_of_code_is_a_package_setup_py_ships() -> None:
    """setup.py ships find_packages(): a folder of modules without __init__.py is left out of a
    non-editable install (recipe/tracking was, before this test)."""
    from setuptools import find_packages

    shipped = set(find_packages(where=str(REPO), include=["copo_core*", "recipe*", "data_prep*"]))
    folders = {
        ".".join(path.parent.relative_to(REPO).parts)
        for top in ("copo_core", "recipe", "data_prep")
        for path in (REPO / top).rglob("*.py")
    }
    assert folders <= shipped, f"add an __init__.py to: {sorted(folders - shipped)}"


# ----------------------------------------------------------------------------- private names stay home
def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(root: Path) -> list[str]:
    """``path:line: importer imports module.name`` for every import of another module's private
    (``_``-prefixed) name or private module, in every module outside ``tests``."""
    files = module_files(root)
    found = []
    for name, path in files.items():
        if name.split(".")[0] == "tests":
            continue  # a test may reach into the module it tests
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(name, is_package, node)
                if _known(base, files) is None:
                    continue  # third-party
                bad = [f"{base}.{a.name}" for a in node.names if _private(a.name)]
                bad += [base] if any(_private(part) for part in base.split(".")) else []
            elif isinstance(node, ast.Import):
                bad = [
                    a.name
                    for a in node.names
                    if _known(a.name, files) and any(map(_private, a.name.split(".")))
                ]
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno}: {name} imports {target}" for target in bad]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    found = private_imports(REPO)
    assert not found, "make the name public or move it where both modules can import it:\n" + "\n".join(found)


def test_the_private_name_and_import_module_checks_can_fail(tmp_path: Path) -> None:
    files = {
        "recipe/__init__.py": "",
        "recipe/tracking/__init__.py": "",
        "recipe/tracking/names.py": "_SECRET = 1\n",
        "recipe/tracking/plots.py": "from recipe.tracking.names import _SECRET\n",
        "recipe/study/__init__.py": "",
        "recipe/study/a.py": "import importlib\nm = importlib.import_module('recipe.tracking.plots')\n",
        "tests/test_x.py": "from recipe.tracking.names import _SECRET\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for top in ("copo_core", "data_prep", "scripts"):
        (tmp_path / top).mkdir()
    assert private_imports(tmp_path) == [
        "recipe/tracking/plots.py:1: recipe.tracking.plots imports recipe.tracking.names._SECRET"
    ]
    assert import_edges(tmp_path)["recipe.study.a"] == {"recipe.tracking.plots": 2}


# ----------------------------------------------------------------------------- metric names have one home
NAMES = REPO / "recipe" / "tracking" / "names.py"
CODE_TOPS = ("copo_core", "recipe", "data_prep", "scripts")


def metric_namespaces(names_file: Path = NAMES) -> set[str]:
    """The first segment of every metric name names.py spells (``perf`` of ``perf/step_wall_s``)."""
    strings = _code_strings(ast.parse(names_file.read_text()))
    return {s.split("/", 1)[0] for s in strings if re.fullmatch(r"[a-z_-]+/.*", s)}


def metric_literals(path: Path, namespaces: set[str]) -> list[str]:
    """``path:line: 'literal'`` for each string (docstrings aside; f-strings' literal parts too) that
    starts with ``<namespace>/``."""
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    return [
        f"{where}:{n.lineno}: {n.value!r}"
        for n in _code_string_nodes(tree)
        if "/" in n.value and n.value.split("/", 1)[0] in namespaces
    ]


def test_no_module_but_names_spells_a_metric_name() -> None:
    namespaces = metric_namespaces()
    assert {"perf", "groups", "timing_s", "actor", "training", "copo", "signal"} <= namespaces
    found = [
        hit
        for top in CODE_TOPS
        for path in sorted((REPO / top).rglob("*.py"))
        if path != NAMES
        for hit in metric_literals(path, namespaces)
    ]
    assert not found, "metric names belong in recipe/tracking/names.py:\n" + "\n".join(found)


def test_the_metric_name_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "run.py"
    bad.write_text(
        '"""Writes perf/step_wall_s (a docstring may name it)."""\nrow = {"perf/step_wall_s": 1.0}\n'
        'key = f"groups/{1}/count"\nfine = "a/b"\n'
    )
    assert [hit.split(":", 1)[1] for hit in metric_literals(bad, {"perf", "groups"})] == [
        "2: 'perf/step_wall_s'",
        "3: 'groups/'",
    ]


# ----------------------------------------------------------------------------- testbed studies are leaves
TESTBED_STUDY = re.compile(r"recipe\.study\.testbed\d+")


def rows_naming_a_testbed(table: dict[str, set[str] | None]) -> list[str]:
    """``component -> testbed study`` for every row that allows importing a testbed study."""
    return [
        f"{component} -> {other}"
        for component, allowed in table.items()
        for other in sorted(allowed or ())
        if TESTBED_STUDY.fullmatch(other)
    ]


def test_no_testbed_study_imports_another() -> None:
    """Each testbed study has its own row and no row names one: v3 cannot import v2 (nor v2 v3); what
    both need lives in ``recipe.study.common``. The import rule above then refuses any such import."""
    studies = [c for c in TABLE if TESTBED_STUDY.fullmatch(c)]
    assert {"recipe.study.testbed2", "recipe.study.testbed3"} <= set(studies)
    assert not rows_naming_a_testbed(TABLE), "a testbed study is imported by no component"


def test_the_testbed_rule_can_fail() -> None:
    table = {
        "recipe.study.testbed2": set(),
        "recipe.study.testbed3": {"recipe.study.testbed2", "recipe.study"},
    }
    assert rows_naming_a_testbed(table) == ["recipe.study.testbed3 -> recipe.study.testbed2"]


# ----------------------------------------------------------------------------- overrides are built in recipe/launch
LAUNCH = REPO / "recipe" / "launch"
# ``section.key=`` (Hydra's ``+``/``++`` prefixes allowed): the head of an override of a run's config.
OVERRIDE_HEAD = re.compile(r"\+{0,2}[a-z_]+(\.[A-Za-z0-9_]+)+=")


def _spells_an_override(node: ast.JoinedStr) -> bool:
    """An f-string that computes ``key=value``: a literal head ``section.key=`` followed by a value
    (``f"trainer.total_training_steps={n}"``), or ``{..._KEY}={value}`` (the key held in a constant).
    Sentences (error messages naming a setting) have spaces in their literal parts and do not count."""
    parts = node.values
    if any(isinstance(p, ast.Constant) and re.search(r"\s", str(p.value)) for p in parts):
        return False
    head = parts[0]
    if isinstance(head, ast.Constant) and OVERRIDE_HEAD.match(str(head.value)):
        return True
    return (
        len(parts) >= 3
        and isinstance(head, ast.FormattedValue)
        and isinstance(head.value, ast.Name)
        and head.value.id.lower().endswith("key")
        and isinstance(parts[1], ast.Constant)
        and parts[1].value == "="
    )


def override_builders(path: Path) -> list[str]:
    """``path:line: f-string`` for each f-string of ``path`` that builds a run's Hydra override."""
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    hits = [n for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) and _spells_an_override(n)]
    return [
        f"{where}:{n.lineno}: {ast.unparse(n)}" for n in sorted(hits, key=lambda n: (n.lineno, n.col_offset))
    ]


def test_only_recipe_launch_builds_an_override() -> None:
    """A run's overrides are built by ``recipe.launch`` (``RunSpec.overrides``, ``format_overrides``):
    callers pass typed values and mappings. Tests (``test_*.py``) may spell the overrides they check;
    their helpers (the e2e and fault harnesses) may not."""
    found = [
        hit
        for top in TOPS
        for path in sorted((REPO / top).rglob("*.py"))
        if not path.is_relative_to(LAUNCH) and not path.name.startswith("test_")
        for hit in override_builders(path)
    ]
    assert not found, "build overrides with recipe.launch (RunSpec, format_overrides):\n" + "\n".join(found)
    assert override_builders(LAUNCH / "spec.py") == [], "the launcher itself builds with key + '=' + value"


def test_the_override_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "launcher.py"
    bad.write_text(
        'MODEL_KEY = "actor_rollout_ref.model.path"\n'
        'a = [f"trainer.total_training_steps={3}", f"++ray_kwargs.ray_init.num_cpus={2}"]\n'
        'b = f"{MODEL_KEY}={a}"\n'
        'fine = [f"trainer.resume_from_path={a} is not a complete checkpoint", f"{MODEL_KEY}=", f"{a}={a}"]\n'
    )
    assert [hit.split(":", 2)[1] for hit in override_builders(bad)] == ["2", "2", "3"]
