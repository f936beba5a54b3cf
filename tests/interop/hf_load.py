"""Run in a fresh process by the export tests: load each exported directory with transformers alone
(``trust_remote_code`` for the remote-code form) and write its logits on padded batches and its
greedy tokens from ``generate``. Usage: python -m tests.interop.hf_load JOB.pt OUT.pt"""
import inspect
import sys

import torch


def positions(mask):
    return (mask.cumsum(-1) - 1).clamp(min=0)


def main(job_file, out_file):
    import transformers as tf

    jobs = torch.load(job_file)
    results = {}
    for job in jobs:
        auto = getattr(tf, job["auto_class"])
        model = auto.from_pretrained(job["dir"], trust_remote_code=job["remote"]).float().eval()
        out = {}
        with torch.no_grad():
            for side in ("right", "left"):
                ids, mask = job[side]
                kwargs = {"attention_mask": mask}
                if job["auto_class"] == "AutoModelForSeq2SeqLM":
                    dec, dec_mask = job[f"{side}_decoder"]
                    kwargs.update(decoder_input_ids=dec, decoder_attention_mask=dec_mask)
                elif "position_ids" in inspect.signature(model.forward).parameters:
                    kwargs["position_ids"] = positions(mask)
                out[side] = model(input_ids=ids, **kwargs).logits
            if job["auto_class"] != "AutoModelForMaskedLM":
                out["greedy"] = [model.generate(torch.tensor([p]), max_new_tokens=job["new_tokens"], do_sample=False,
                                                num_beams=1)[0].tolist() for p in job["prompts"]]
        results[job["dir"]] = out
    torch.save(results, out_file)


if __name__ == "__main__":
    main(*sys.argv[1:3])
