"""Values rendered into a bundle's generated source (Kotlin, Swift) are escaped for it: whatever a
results.json or a model's own names hold, a string literal decodes to the value and a comment stays
closed. (No Kotlin or Swift compiler here: the escapes are decoded by the languages' rules below.)
Names that become file names and shell words are refused unless edgeship could have written them."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from edgeship.bundle.snippets import kotlin_text, swift_text
from edgeship.cli import main

HOSTILE = ['x"); System.exit(0); //', "a */ fun evil() {} /* b", "${Runtime.getRuntime().exec(\"id\")}",
           "\\(exit(0))", "line\nbreak\r", "tab\there\x00nul", "caf\u00e9 \U0001F600", "back\\slash\\"]
ESCAPE = re.compile(r'\\(u\{[0-9a-fA-F]+\}|u[0-9a-fA-F]{4}|.)', re.S)
SIMPLE = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\", "$": "$", "'": "'", "0": "\0"}


def decode(literal: str, swift: bool) -> str:
    """The value of a string literal's body by the language's escapes (Kotlin \\uXXXX code units;
    Swift \\u{X}); an escape the language does not have is an error, as the compiler would say."""
    def one(m: re.Match) -> str:
        esc = m.group(1)
        if esc.startswith("u{") and swift:
            return chr(int(esc[2:-1], 16))
        if esc.startswith("u") and not swift and len(esc) == 5:
            return chr(int(esc[1:], 16))
        if esc in SIMPLE and (esc != "$" or not swift):
            return SIMPLE[esc]
        raise AssertionError(f"\\{esc} is not an escape of {'Swift' if swift else 'Kotlin'}")
    units = ESCAPE.sub(one, literal)
    return units.encode("utf-16", "surrogatepass").decode("utf-16") if not swift else units


@pytest.mark.parametrize("value", HOSTILE)
def test_a_value_in_a_string_literal_decodes_to_itself_and_cannot_close_it(value: str) -> None:
    for escape, swift in ((kotlin_text, False), (swift_text, True)):
        text = escape(value)
        assert decode(text, swift) == value
        assert not re.search(r'(?<!\\)(\\\\)*"', text.replace('\\"', "")), text  # no quote left unescaped
        assert "\n" not in text and "\r" not in text and "*/" not in text and "/*" not in text
        if not swift:
            assert not re.search(r"(?<!\\)\$", text), text  # no Kotlin string template


def test_faults_a_toolchain_string_that_would_close_the_comment_stays_inside_it(two_device_build: Path,
                                                                                 tmp_path: Path) -> None:
    """A results.json whose executorch version holds "*/ fun evil() {} /*" (the issue's case): the
    android bundle's ModelLoader.kt keeps it inside its KDoc comment."""
    import zipfile

    out = tmp_path / "out"
    shutil.copytree(two_device_build, out)
    doc = json.loads((out / "results.json").read_text())
    doc["toolchain"]["executorch"] = "1.5.1 */ fun evil() {} /* x"
    doc["toolchain"]["torch"] = 'torch" + "$(id)'
    (out / "results.json").write_text(json.dumps(doc))
    root = two_device_build.parent
    argv = ["bundle", "--target", str(root / "twodev.toml"), "--model", str(root / "tiny" / "model.toml"),
            "--out", str(out), "--platform", "android"]
    assert main(argv) == 0
    with zipfile.ZipFile(next(out.glob("*-android.zip"))) as zf:
        kotlin = zf.read(next(n for n in zf.namelist() if n.endswith("ModelLoader.kt"))).decode()
    code = re.sub(r"/\*.*?\*/", "", kotlin, flags=re.S)  # the code outside block comments (none nest here)
    code = re.sub(r"//[^\n]*", "", code)
    assert "evil" not in code and "$(id)" not in code
    assert "executorch 1.5.1 \\u002a/ fun evil() {} /\\u002a x" in kotlin


def test_faults_a_file_name_edgeship_would_not_write_is_refused_by_bundle(two_device_build: Path,
                                                                         tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    shutil.copytree(two_device_build, out)
    doc = json.loads((out / "results.json").read_text())
    next(v for v in doc["variants"] if v["name"] == "onnx-fp32")["file"] = "onnx-fp32/model$(id).onnx"
    (out / "results.json").write_text(json.dumps(doc))
    root = two_device_build.parent
    capsys.readouterr()
    assert main(["bundle", "--target", str(root / "twodev.toml"), "--model", str(root / "tiny" / "model.toml"),
                 "--out", str(out), "--platform", "android"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "onnx-fp32's file is 'model$(id).onnx', not a name edgeship writes" in err
    assert not list(tmp_path.glob("*.zip")) and not list(tmp_path.parent.glob("*.zip"))
