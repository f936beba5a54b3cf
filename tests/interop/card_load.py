"""Run in a fresh process by the export-message tests: for each exported directory, the model card's
own snippet (README.md's python block, DIR set to the directory), then the loaded model's logits, its
greedy tokens and the tokenizer's ids, so that what the snippet printed on the way can be checked.
Usage: python -m tests.interop.card_load JOB.pt OUT.pt"""
import re
import sys

import torch


def card_snippet(directory: str) -> str:
    with open(f"{directory}/README.md") as f:
        return re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)


def main(job_file, out_file):
    results = {}
    for job in torch.load(job_file):
        scope = {"DIR": job["dir"]}
        exec(card_snippet(job["dir"]), scope)  # noqa: S102 - the card's own code is what is under test
        model, tokenizer = scope["model"].float().eval(), scope["tokenizer"]
        with torch.no_grad():
            logits = model(input_ids=job["ids"]).logits
            greedy = model.generate(job["ids"][:1], max_new_tokens=4, do_sample=False, num_beams=1)[0].tolist()
        results[job["dir"]] = {"logits": logits, "greedy": greedy, "ids": tokenizer(job["text"])["input_ids"]}
    torch.save(results, out_file)


if __name__ == "__main__":
    main(*sys.argv[1:3])
