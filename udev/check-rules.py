#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks udev rules files: syntax (keys, attributes, operators, quoting, substitutions, as
udev(7) of systemd 252 defines them) and that the NPO rules match the card's PCI IDs.

systemd 252 (Debian 12) has no `udevadm verify` (added in 253): this script is the syntax
check there, and runs `udevadm verify` as well where it exists.

Usage:
  check-rules.py --rules FILE [--vendor 0xVVVV --device 0xDDDD] [--pci-hpp pci.hpp]
                 [--cmake-lists CMakeLists.txt] [--udevadm PATH]
  check-rules.py --self-test
Exit status 0 when everything holds; 1 with one line per problem otherwise.
"""
import argparse
import re
import subprocess
import sys

# key -> (attribute: "required" | "optional" | "none", allowed operators)
MATCH = {"==", "!="}
ASSIGN = {"=", "+=", "-=", ":="}
KEYS = {
    "ACTION": ("none", MATCH),
    "DEVPATH": ("none", MATCH),
    "KERNEL": ("none", MATCH),
    "KERNELS": ("none", MATCH),
    "SUBSYSTEM": ("none", MATCH),
    "SUBSYSTEMS": ("none", MATCH),
    "DRIVER": ("none", MATCH),
    "DRIVERS": ("none", MATCH),
    "ATTRS": ("required", MATCH),
    "TAGS": ("none", MATCH),
    "TEST": ("optional", MATCH),
    "RESULT": ("none", MATCH),
    "CONST": ("required", MATCH),
    # PROGRAM is a match; udev also accepts "=" for it (and treats it as a match).
    "PROGRAM": ("none", MATCH | {"="}),
    "NAME": ("none", MATCH | {"=", ":="}),
    "SYMLINK": ("none", MATCH | ASSIGN),
    "ATTR": ("required", MATCH | {"=", ":="}),
    "SYSCTL": ("required", MATCH | {"=", ":="}),
    "ENV": ("required", MATCH | ASSIGN),
    "TAG": ("none", MATCH | ASSIGN),
    "OWNER": ("none", {"=", ":="}),
    "GROUP": ("none", {"=", ":="}),
    "MODE": ("none", {"=", ":="}),
    "SECLABEL": ("required", {"=", "+=", ":="}),
    "RUN": ("optional", {"=", "+=", ":="}),
    "LABEL": ("none", {"="}),
    "GOTO": ("none", {"="}),
    "IMPORT": ("required", {"=", "+=", ":="}),
    "OPTIONS": ("none", {"=", "+=", ":="}),
}
RUN_TYPES = {"program", "builtin"}
IMPORT_TYPES = {"program", "builtin", "file", "db", "cmdline", "parent"}
DOLLAR = {"kernel", "number", "devpath", "id", "driver", "attr", "sysctl", "env", "major", "minor", "result",
          "parent", "name", "links", "root", "sys", "devnode", "tempnode"}
PERCENT = set("knpbdsEMmcPNrSD")

TOKEN = re.compile(r'\s*(?P<key>[A-Z_]+)(?:\{(?P<attr>[^{}"]*)\})?\s*(?P<op>==|!=|\+=|-=|:=|=)\s*'
                   r'"(?P<value>(?:[^"\\]|\\.)*)"\s*(?P<sep>,|$)')


def check_substitutions(value, where, problems):
    i = 0
    while i < len(value):
        c = value[i]
        if c == "$":
            if value.startswith("$$", i):
                i += 2
                continue
            m = re.match(r"\$([a-z]+)(\{[^{}]*\})?", value[i:])
            if not m or m.group(1) not in DOLLAR:
                problems.append(f"{where}: unknown substitution at '{value[i:i + 12]}'")
                return
            if m.group(1) in ("attr", "env", "sysctl") and not m.group(2):
                problems.append(f"{where}: ${m.group(1)} needs {{name}}")
            i += len(m.group(0))
            continue
        if c == "%":
            if i + 1 >= len(value):
                problems.append(f"{where}: '%' at the end of a value")
                return
            n = value[i + 1]
            if n == "%":
                i += 2
                continue
            if n not in PERCENT:
                problems.append(f"{where}: unknown substitution '%{n}'")
                return
            i += 2
            continue
        i += 1


def parse_rule(text, where, problems):
    """Returns [(key, attr, op, value)] or None after appending problems."""
    tokens = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = TOKEN.match(text, pos)
        if not m:
            problems.append(f"{where}: cannot parse at '{text[pos:pos + 40].strip()}' "
                            '(expected KEY[{attr}]OP"value", comma-separated)')
            return None
        key, attr, op, value = m.group("key"), m.group("attr"), m.group("op"), m.group("value")
        if key not in KEYS:
            problems.append(f"{where}: unknown key {key}")
        else:
            attr_rule, ops = KEYS[key]
            if attr_rule == "required" and not attr:
                problems.append(f"{where}: {key} needs {{attribute}}")
            if attr_rule == "none" and attr is not None:
                problems.append(f"{where}: {key} takes no {{attribute}}")
            if op not in ops:
                problems.append(f"{where}: operator {op} is not valid for {key} (valid: {' '.join(sorted(ops))})")
            if key == "RUN" and attr is not None and attr not in RUN_TYPES:
                problems.append(f"{where}: RUN{{{attr}}}: type must be program or builtin")
            if key == "IMPORT" and attr not in IMPORT_TYPES:
                problems.append(f"{where}: IMPORT{{{attr}}}: unknown type")
            if key == "MODE" and not re.fullmatch(r"0?[0-7]{3,4}", value):
                problems.append(f"{where}: MODE '{value}' is not an octal mode")
            if key in ("GROUP", "OWNER") and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*\$?|[0-9]+", value):
                problems.append(f"{where}: {key} '{value}' is not a user/group name")
        check_substitutions(value, f"{where} {key}", problems)
        tokens.append((key, attr, op, value))
        pos = m.end()
        if m.group("sep") == "" and pos < len(text) and text[pos:].strip():
            problems.append(f"{where}: missing ',' before '{text[pos:pos + 20].strip()}'")
            return None
    if text.rstrip().endswith(","):
        problems.append(f"{where}: trailing ','")
    if tokens and not any(op not in MATCH and k not in ("PROGRAM",) for k, _, op, _ in tokens):
        problems.append(f"{where}: the rule only matches and assigns nothing")
    return tokens


def parse_file(text, name):
    """Returns (rules, problems); rules are (line number, tokens)."""
    problems, rules = [], []
    logical, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\n")
        if not logical:
            start = n
            stripped = line.strip()
            if stripped == "" or stripped.startswith("#"):
                continue
        if line.endswith("\\"):
            logical += line[:-1]
            continue
        logical += line
        tokens = parse_rule(logical, f"{name}:{start}", problems)
        if tokens:
            rules.append((start, tokens))
        logical = ""
    if logical:
        problems.append(f"{name}:{start}: the file ends inside a continued line")
    return rules, problems


def id_values(rules, attr_name):
    return [v for _, toks in rules for k, a, op, v in toks if k in ("ATTR", "ATTRS") and a == attr_name and op == "=="]


def check_ids(rules, vendor, device, problems):
    vendor, device = vendor.lower(), device.lower()
    vs, ds = id_values(rules, "vendor"), id_values(rules, "device")
    if not vs or not ds:
        problems.append("no rule matches ATTR{vendor}/ATTR{device}: the card is never selected")
    for v in vs:
        if v != vendor:
            problems.append(f"a rule matches vendor {v}, the card's is {vendor}")
    for d in ds:
        if d != device:
            problems.append(f"a rule matches device {d}, the card's is {device}")
    if len(vs) != len(ds):
        problems.append("vendor and device matches are not paired")
    binds = [toks for _, toks in rules if ("ATTR", "driver_override", "=", "vfio-pci") in toks]
    if not binds:
        problems.append('no rule sets ATTR{driver_override}="vfio-pci"')
    for toks in binds:
        keys = {(k, a) for k, a, op, _ in toks if op == "=="}
        if ("ATTR", "vendor") not in keys or ("ATTR", "device") not in keys:
            problems.append("the driver_override rule does not match both vendor and device")
    if not any(("GROUP", None, "=", "npo") in toks for _, toks in rules):
        problems.append('no rule sets GROUP="npo"')
    for sub in ("vfio", "vfio-dev"):
        if not any(("SUBSYSTEM", None, "==", sub) in toks and ("GROUP", None, "=", "npo") in toks for _, toks in rules):
            problems.append(f'no rule gives group npo the {sub} nodes')


def spec_default(path, name):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"#define\s+" + name + r"\s+(0x[0-9a-fA-F]+)", text)
    return m.group(1).lower() if m else None


def cmake_default(path, name):
    text = open(path, encoding="utf-8").read()
    m = re.search(r"set\(\s*" + name + r'\s+"(0x[0-9a-fA-F]+)"', text)
    return m.group(1).lower() if m else None


def run_udevadm_verify(udevadm, rules_path):
    if not udevadm:
        return "udevadm not found: syntax checked by this script only"
    probe = subprocess.run([udevadm, "verify", "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "udevadm has no 'verify' (systemd < 253, e.g. Debian 12's 252): syntax checked by this script only"
    r = subprocess.run([udevadm, "verify", "--resolve-names=never", rules_path], capture_output=True, text=True)
    if r.returncode != 0:
        return "FAIL udevadm verify: " + (r.stdout + r.stderr).strip().replace("\n", " | ")
    return "udevadm verify: OK"


def self_test():
    good = ('ACTION=="add", SUBSYSTEM=="pci", ATTR{vendor}=="0x1ee7", ATTR{device}=="0x0a01", '
            'ATTR{driver_override}="vfio-pci", RUN+="npo-vfio-bind udev-probe $kernel"\n'
            'ACTION=="add", SUBSYSTEM=="vfio", KERNEL=="[0-9]*", PROGRAM="npo-vfio-bind is-npo-group %k", '
            'GROUP="npo", MODE="0660"\n'
            'ACTION=="add", SUBSYSTEM=="vfio-dev", ATTRS{vendor}=="0x1ee7", ATTRS{device}=="0x0a01", '
            'GROUP="npo", MODE="0660"\n'
            '# comment\n\nSUBSYSTEM=="misc", \\\n  KERNEL=="iommu", GROUP="npo"\n')
    rules, problems = parse_file(good, "good")
    failures = []
    if problems or len(rules) != 4:
        failures.append(f"good rules rejected: {problems} ({len(rules)} rules)")
    p = []
    check_ids(rules, "0x1ee7", "0x0a01", p)
    if p:
        failures.append(f"good IDs rejected: {p}")
    p = []
    check_ids(rules, "0x1ee7", "0x0a02", p)
    if not p:
        failures.append("a device ID mismatch was not caught")
    bad = {
        "unknown key": 'SUBSYSTEM=="pci", VENDOR=="x", GROUP="npo"',
        "== on an assignment key": 'SUBSYSTEM=="pci", GROUP=="npo"',
        "= on a match key": 'SUBSYSTEM="pci", GROUP="npo"',
        "ATTR without attribute": 'ATTR=="x", GROUP="npo"',
        "attribute on a plain key": 'KERNEL{x}=="x", GROUP="npo"',
        "unquoted value": 'SUBSYSTEM==pci, GROUP="npo"',
        "unterminated quote": 'SUBSYSTEM=="pci, GROUP="npo"',
        "missing comma": 'SUBSYSTEM=="pci" GROUP="npo"',
        "trailing comma": 'SUBSYSTEM=="pci", GROUP="npo",',
        "octal mode": 'SUBSYSTEM=="pci", MODE="rw-rw----"',
        "match only": 'SUBSYSTEM=="pci", KERNEL=="x"',
        "bad substitution": 'SUBSYSTEM=="pci", RUN+="x $kernal"',
        "bad percent": 'SUBSYSTEM=="pci", RUN+="x %q"',
        "bad RUN type": 'SUBSYSTEM=="pci", RUN{shell}+="x"',
        "group name": 'SUBSYSTEM=="pci", GROUP="n po"',
        "continued at end": 'SUBSYSTEM=="pci", \\',
    }
    for what, text in bad.items():
        _, pr = parse_file(text + "\n", what)
        if not pr:
            failures.append(f"not caught: {what}: {text}")
    for f in failures:
        print("FAIL self-test:", f)
    print(f"self-test: {len(bad) + 3 - len(failures)}/{len(bad) + 3} cases")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rules")
    ap.add_argument("--vendor")
    ap.add_argument("--device")
    ap.add_argument("--pci-hpp")
    ap.add_argument("--cmake-lists")
    ap.add_argument("--udevadm", default="")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.rules:
        ap.error("--rules is required")
    text = open(a.rules, encoding="utf-8").read()
    rules, problems = parse_file(text, a.rules)
    if a.vendor and a.device:
        check_ids(rules, a.vendor, a.device, problems)
    notes = []
    if a.pci_hpp:
        sv, sd = spec_default(a.pci_hpp, "NPO_PCI_VENDOR_ID"), spec_default(a.pci_hpp, "NPO_PCI_DEVICE_ID")
        if not sv or not sd:
            problems.append(f"{a.pci_hpp}: no NPO_PCI_VENDOR_ID/NPO_PCI_DEVICE_ID defaults found")
        elif a.vendor and a.device and (sv, sd) != (a.vendor.lower(), a.device.lower()):
            notes.append(f"build IDs {a.vendor}:{a.device} override the spec's defaults {sv}:{sd} "
                         "(both the rules and the code use the build's)")
        else:
            notes.append(f"IDs {sv}:{sd} agree with {a.pci_hpp}")
        if a.cmake_lists:
            cv, cd = cmake_default(a.cmake_lists, "NPO_PCI_VENDOR_ID"), cmake_default(a.cmake_lists, "NPO_PCI_DEVICE_ID")
            if (cv, cd) != (sv, sd):
                problems.append(f"CMake defaults {cv}:{cd} differ from the spec's {sv}:{sd}")
    verify = run_udevadm_verify(a.udevadm, a.rules)
    if verify.startswith("FAIL"):
        problems.append(verify)
    else:
        notes.append(verify)
    for n in notes:
        print("note:", n)
    for p in problems:
        print("FAIL", p)
    print(f"{a.rules}: {len(rules)} rules, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
