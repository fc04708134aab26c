#!/usr/bin/env python3
"""Independent check of structured outputs: validates each line's text against its schema
with the `jsonschema` package (not the server's matcher).

Input (argv[1]): JSON lines {"schema": <schema>, "text": "<generated text>"}.
Output: one line per input, "ok" or "invalid: <reason>". Exit 3 when jsonschema is missing.
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("jsonschema is not installed", file=sys.stderr)
    sys.exit(3)


def check(schema, text):
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return "invalid: not JSON (%s)" % e
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    return "ok" if not errors else "invalid: " + errors[0].message


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                print(check(rec["schema"], rec["text"]).replace("\n", " "))


main()
