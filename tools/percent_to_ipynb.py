"""Turn a notebook written as a percent-format script into .ipynb (an authoring aid).

    python tools/percent_to_ipynb.py draft.py notebooks/01_sync_vs_async.ipynb

Cells start with `# %%` (code), `# %% [markdown]` (markdown, each line prefixed by `# `), and may
carry tags: `# %% tags=["raises-exception"]`. Outputs are never stored.
"""
import json
import re
import sys

import nbformat


def convert(text: str):
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    chunks = re.split(r"^# %%(.*)$", text, flags=re.M)
    for header, body in zip(chunks[1::2], chunks[2::2]):
        body = body.strip("\n")
        tags = json.loads(m.group(1)) if (m := re.search(r"tags=(\[.*\])", header)) else []
        if "[markdown]" in header:
            src = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            cell = nbformat.v4.new_markdown_cell(src)
        else:
            cell = nbformat.v4.new_code_cell(body)
        if tags:
            cell.metadata["tags"] = tags
        cell["id"] = f"cell-{len(nb.cells):02d}"  # stable ids: a rewrite changes only what changed
        nb.cells.append(cell)
    return nb


if __name__ == "__main__":
    src, dst = sys.argv[1:3]
    nb = convert(open(src).read())
    nbformat.write(nb, dst)
