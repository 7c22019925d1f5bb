"""The rules page: every rule of the workflow with its outputs, log, the comment that explains it and the code
it runs (``scripts/{rule}.py`` and the library function that script calls), grouped by rule file in the order
the Snakefile includes them, and every path pattern (``PATHS``), all as Snakemake parses the workflow.

Some rules exist only for some configurations (the encoding rules are made per set of outputs of the
configured models; the exact search's rules and the approximate indexes' are alternatives), so the workflow
is parsed with each of :data:`PARSE_CONFIGS`, which together use every family and both kinds of dense
search, and a rule made by only some of them says so."""

from __future__ import annotations

import ast
import copy
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from miracl_eval.manual.markdown import cell, code, table
from miracl_eval.report.stage_costs import plain_pattern

_ALL_FAMILIES: dict[str, Any] = {
    "dataset": "miracl",
    "languages": ["sw"],
    "models": {
        "m3": {"family": "bge-m3", "checkpoint": "resources/models/tiny-bge-m3"},
        "dense": {"family": "dense", "checkpoint": "resources/models/tiny-xlm-r", "pooling": "mean", "normalize": True},
        "splade": {"family": "splade", "checkpoint": "resources/models/tiny-mlm"},
        "api": {"family": "openai", "model": "an-embedding-model", "base_url": "http://127.0.0.1:8000/v1"},
    },
    "rerankers": {"ce": {"family": "cross-encoder", "checkpoint": "resources/models/tiny-cross-encoder"}},
    "hybrids": {"bm25+dense": {"systems": ["bm25", "dense/dense"], "method": "rrf"}},
    "methods": [
        "bm25", "m3/dense", "m3/sparse", "m3/multivec", "m3/dense+sparse", "m3/all", "dense/dense",
        "splade/sparse", "api/dense", "bm25+dense", "bm25>>ce",
    ],
}  # fmt: skip
#: configurations whose parses together make every rule: every family, with the exact search (the default)
#: and with an approximate index
PARSE_CONFIGS: Mapping[str, Mapping[str, Any]] = {
    "dense_index.type: flat": _ALL_FAMILIES,
    "dense_index.type: hnsw or ivfpq": {**_ALL_FAMILIES, "dense_index": {"type": "ivfpq"}},
}


@dataclass
class Rule:
    """A rule as Snakemake parsed it."""

    name: str
    #: the file that defines it, relative to the repository (``rules/bm25.smk``)
    file: str
    #: its line in that file
    line: int
    #: the comment block right above it
    comment: str
    #: ``(name, pattern)`` of each output (name empty when unnamed), wildcards without their constraints
    outputs: list[tuple[str, str]]
    log: list[str]
    #: its script, relative to the repository (``scripts/bm25_search.py``), or empty
    script: str
    #: the configurations (keys of :data:`PARSE_CONFIGS`) whose parse made it
    configs: list[str] = field(default_factory=list)


@dataclass
class Workflow:
    """What the rules page shows: the rules by file, each file's header comment, the path patterns."""

    rules: list[Rule]
    #: rule files in the order the Snakefile includes them, with their header comments
    files: dict[str, str]
    paths: dict[str, str]


def header_comment(text: str) -> str:
    """The comment lines that open a rule file (``# ...``), as one paragraph."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines).strip()


def comment_above(text: str, line: int) -> str:
    """The comment block right above line ``line`` (1-based) of ``text``, as one paragraph."""
    lines = text.splitlines()
    found: list[str] = []
    index = line - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        found.insert(0, lines[index].strip().lstrip("#").strip())
        index -= 1
    return " ".join(found).strip()


def library_calls(script: Path) -> list[str]:
    """What a script runs of the library: ``module.function`` of each name it imports from ``miracl_eval``
    (but :mod:`miracl_eval.jobs`' runner and preload helpers) and of each named call
    (``Call("module", "function", ...)``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("miracl_eval"):
            if node.module.startswith("miracl_eval.jobs."):  # the runner and the preload call: no stage
                continue
            found += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Call":
            names = [a.value for a in node.args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if len(names) == 2:
                found.append(".".join(names))
    return list(dict.fromkeys(found))


def stage_function(script: Path) -> str | None:
    """The library function a script's job runs: the named call handed to the stage runner
    (``run_stage(sm, Call("module", "function", ...))``), or the function its ``lambda`` calls
    (``run_stage(sm, lambda: function(...))``); None when the script has neither."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("miracl_eval")
        for alias in node.names
    }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_stage" and len(node.args) > 1):
            continue
        work = node.args[1]
        if isinstance(work, ast.Call) and getattr(work.func, "id", None) == "Call":
            names = [a.value for a in work.args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            return ".".join(names) if len(names) == 2 else None
        if isinstance(work, ast.Lambda) and isinstance(work.body, ast.Call):
            name = getattr(work.body.func, "id", None)
            return imported.get(name) if name else None
    return None


def parse(repo: Path, config: Mapping[str, Any]) -> tuple[list[Rule], dict[str, str], list[str]]:
    """The rules, ``PATHS`` and included rule files of the workflow in ``repo`` as Snakemake parses it with
    ``config`` (in a scratch working directory: nothing is run, nothing is written beside the workflow)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, Quietness, ResourceSettings

    rules: list[Rule] = []
    with tempfile.TemporaryDirectory(prefix="miracl-eval-docs-") as scratch:
        config_file = Path(scratch) / "docs.yaml"
        config_file.write_text(yaml.safe_dump(copy.deepcopy(dict(config))), encoding="utf-8")
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            workflow_api = api.workflow(
                resource_settings=ResourceSettings(),
                config_settings=ConfigSettings(configfiles=[config_file]),
                snakefile=repo / "Snakefile",
                workdir=Path(scratch),
            )
            workflow = workflow_api._workflow  # the parsed workflow (Snakemake's own API holds it so)
            texts: dict[str, str] = {}
            for rule in workflow.rules:
                source = Path(rule.snakefile)
                if str(source) not in texts:
                    texts[str(source)] = source.read_text(encoding="utf-8")
                line = workflow.linemaps.get(rule.snakefile, {}).get(rule.lineno, rule.lineno)
                named = {id(v): k for k, v in rule.output._allitems() if k is not None}
                script = ""
                if rule.script:
                    script = str((source.parent / str(rule.script)).resolve().relative_to(repo))
                rules.append(
                    Rule(
                        name=rule.name,
                        file=str(source.relative_to(repo)),
                        line=int(line),
                        comment=comment_above(texts[str(source)], int(line)),
                        outputs=[(named.get(id(o), ""), plain_pattern(str(o))) for o in rule.output],
                        log=[plain_pattern(str(p)) for p in rule.log],
                        script=script,
                    )
                )
            paths = {str(k): str(v) for k, v in workflow.globals["PATHS"].items()}
            included = [str(Path(f).relative_to(repo)) for f in workflow.included if Path(f).suffix == ".smk"]
    return rules, paths, included


def parse_all(repo: Path, configs: Mapping[str, Mapping[str, Any]] = PARSE_CONFIGS) -> Workflow:
    """The union of the parses with each of ``configs``: every rule once, with the configurations that make it."""
    found: dict[str, Rule] = {}
    paths: dict[str, str] = {}
    files: list[str] = []
    for label, config in configs.items():
        rules, parsed_paths, included = parse(repo, config)
        paths.update(parsed_paths)
        files += [f for f in included if f not in files]
        for rule in rules:
            found.setdefault(rule.name, rule).configs.append(label)
    order = {name: i for i, name in enumerate(["Snakefile", *files])}
    ordered = sorted(found.values(), key=lambda r: (order.get(r.file, len(order)), r.line))
    headers = {f: header_comment((repo / f).read_text(encoding="utf-8")) for f in files}
    return Workflow(ordered, headers, paths)


def _outputs(rule: Rule) -> str:
    return ", ".join(f"{code(p)}{f' ({name})' if name else ''}" for name, p in rule.outputs) or "(none)"


def _rule_section(repo: Path, rule: Rule, every: Sequence[str]) -> str:
    out = [f"### `{rule.name}`\n\n"]
    if rule.comment:
        out.append(cell(rule.comment) + "\n\n")
    if len(rule.configs) < len(every):
        out.append(f"*Made only with {' / '.join(f'`{c}`' for c in rule.configs)}.*\n\n")
    out.append(f"- **outputs**: {_outputs(rule)}\n")
    out.append(f"- **log**: {', '.join(code(p) for p in rule.log) or '(none)'}\n")
    if rule.script:
        stage = stage_function(repo / rule.script)
        calls = code(stage) if stage else ", ".join(code(c) for c in library_calls(repo / rule.script))
        out.append(f"- **runs**: {code(rule.script)} → {calls or '(no library call)'}\n")
    return "".join(out) + "\n"


def rules_page(repo: Path, parsed: Workflow | None = None) -> str:
    """``reference/rules.md``."""
    wf = parsed if parsed is not None else parse_all(repo)
    every = list(PARSE_CONFIGS)
    parts = [
        "# Rules and their outputs\n\n",
        f"The workflow's {len(wf.rules)} rules, by rule file in the order the `Snakefile` includes them, as Snakemake ",
        "parses the workflow at every build of the docs: each rule's outputs and log (wildcards in braces), the ",
        "comment that explains it, and the code it runs, one hop each: the rule's script under `scripts/` and the ",
        "library function that script calls. A target is any output with its wildcards filled in ",
        "(`snakemake runs/miracl/sw/bm25.trec`). Some rules are made only for some configurations (encoding ",
        "rules per set of outputs of the configured models, named after them; the exact search's rules or the ",
        "approximate indexes'): the page is made from the parses with every family and with both kinds of dense ",
        "search, and such a rule says which.\n\n",
        "## Path patterns\n\n",
        "Every path pattern of the workflow is spelled once, in `PATHS` (`rules/common/paths.smk`):\n\n",
        table(("name", "pattern"), ([code(k), code(v)] for k, v in wf.paths.items())),
        "\n",
    ]
    by_file: dict[str, list[Rule]] = {}
    for rule in wf.rules:
        by_file.setdefault(rule.file, []).append(rule)
    for file in [*wf.files, *[f for f in by_file if f not in wf.files]]:
        if file not in by_file:
            continue
        parts.append(f"## `{file}`\n\n")
        if wf.files.get(file):
            parts.append(cell(wf.files[file]) + "\n\n")
        parts += [_rule_section(repo, r, every) for r in by_file[file]]
    return "".join(parts)


def rule_names(parsed: Workflow) -> list[str]:
    return [r.name for r in parsed.rules]
