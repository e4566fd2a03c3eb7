"""PEP 517 build backend of libshard's Python package, standard library only.

The package is pure Python, the directory libshard/ (its modules and
py.typed), so its wheel (PEP 427) is a zip file holding those files, the
licence (the project's COPYING) and three metadata files. Writing it here
keeps the install offline on any Python 3.8+ with pip, where setuptools
would need the `wheel` package that a fresh venv lacks (see pyproject.toml).

Metadata comes from pyproject.toml's [project] table (name, description,
requires-python, license) and the version from libshard/_lib.py's VERSION,
read without importing the package (importing it loads the C library).
"""

import ast
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "libshard"
VERSION_FILE = "libshard/_lib.py"
LICENSE = "COPYING"
# What an sdist carries besides the package: enough to build the wheel again.
SDIST_FILES = ("pyproject.toml", "backend/libshard_build.py", "example.py")
# Fixed timestamps: the same sources give the same wheel, byte for byte.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def _package_files():
    """The package's files (relative paths, sorted): *.py and py.typed."""
    out = []
    for name in sorted(os.listdir(os.path.join(ROOT, PACKAGE))):
        if name.endswith(".py") or name == "py.typed":
            out.append(f"{PACKAGE}/{name}")
    return out


def _license():
    """COPYING: an sdist's own, else the source tree's (two levels up)."""
    for path in (os.path.join(ROOT, LICENSE),
                 os.path.join(ROOT, os.pardir, os.pardir, LICENSE)):
        if os.path.exists(path):
            with open(path, "rb") as f:
                return f.read()
    raise RuntimeError(f"{LICENSE} not found next to pyproject.toml or in "
                       "the source tree above it")


def _project():
    """The [project] table of pyproject.toml."""
    text = _read("pyproject.toml").decode("utf-8")
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return _project_fallback(text)
    return tomllib.loads(text)["project"]


def _project_fallback(text):
    """Before Python 3.11 (no tomllib): the [project] table's keys as this
    project's pyproject.toml writes them, `key = "string"` and
    `key = {text = "string"}`, one per line."""
    table, project = None, {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            table = line
        elif table == "[project]":
            m = re.match(r'([\w-]+)\s*=\s*(\{\s*text\s*=\s*)?"([^"]*)"', line)
            if m:
                project[m.group(1)] = {"text": m.group(3)} if m.group(2) \
                    else m.group(3)
    return project


def _version():
    """VERSION = "..." of libshard/_lib.py, read from its syntax tree."""
    tree = ast.parse(_read(VERSION_FILE))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "VERSION"
                for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{VERSION_FILE} has no VERSION")


def _names():
    project = _project()
    name = project["name"]
    # The distribution name in file names (PEP 427/491: - becomes _).
    return project, name, re.sub(r"[-_.]+", "_", name).lower(), _version()


def _metadata():
    project, name, _, version = _names()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lic = project.get("license")
    if isinstance(lic, dict) and "text" in lic:
        lines.append(f"License: {lic['text']}")
    elif isinstance(lic, str):
        lines.append(f"License-Expression: {lic}")
    lines.append(f"License-File: {LICENSE}")
    return ("\n".join(lines) + "\n").encode("utf-8")


WHEEL = (b"Wheel-Version: 1.0\nGenerator: libshard_build\n"
         b"Root-Is-Purelib: true\nTag: py3-none-any\n")


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return f"{arcname},sha256={digest.rstrip(b'=').decode()},{len(data)}\n"


def _write_wheel(wheel_directory, payload):
    """A wheel of payload [(arcname, bytes)] plus the .dist-info files."""
    _, _, dist, version = _names()
    info = f"{dist}-{version}.dist-info"
    files = list(payload) + [(f"{info}/METADATA", _metadata()),
                             (f"{info}/WHEEL", WHEEL),
                             (f"{info}/{LICENSE}", _license())]
    record = "".join(_record_line(a, d) for a, d in files) + \
        f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode("utf-8")))
    filename = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w",
                         zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            zi = zipfile.ZipInfo(arcname, ZIP_DATE)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return filename


# ---- the PEP 517 and PEP 660 hooks ------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _, _, dist, version = _names()
    info = f"{dist}-{version}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for name, data in (("METADATA", _metadata()), ("WHEEL", WHEEL)):
        with open(os.path.join(metadata_directory, info, name), "wb") as f:
            f.write(data)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory,
                        [(f, _read(f)) for f in _package_files()])


def build_editable(wheel_directory, config_settings=None,
                   metadata_directory=None):
    """pip install -e: a .pth file that puts this directory on sys.path."""
    return _write_wheel(wheel_directory,
                        [("libshard.pth", (ROOT + "\n").encode("utf-8"))])


def build_sdist(sdist_directory, config_settings=None):
    _, _, dist, version = _names()
    base = f"{dist}-{version}"
    filename = f"{base}.tar.gz"
    members = [(f, _read(f)) for f in SDIST_FILES + tuple(_package_files())]
    members += [(LICENSE, _license()), ("PKG-INFO", _metadata())]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz",
                      format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            ti = tarfile.TarInfo(f"{base}/{name}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tf.addfile(ti, io.BytesIO(data))
    return filename
