"""`arch-zoo generate`: continue a prompt (or translate a source) with a trained run."""
from __future__ import annotations

import sys
import warnings

from ..config.kinds import kind_of
from ..errors import ConfigError
from .common import warn


# (flag, argparse dest, the strategies that use it): any other strategy warns that it is ignored
_STRATEGY_OPTIONS = (("--temperature", "temperature", ("sample",)), ("--top-k", "top_k", ("sample",)),
                     ("--top-p", "top_p", ("sample",)), ("--seed", "seed", ("sample",)),
                     ("--beams", "beams", ("beam",)))


def _generate(args) -> int:
    from ..errors import choice_error
    from ..generation import STRATEGIES, generate
    from ..generation.prompts import decoder_start_id, unknown_pieces
    from ..trained.best import best_run, checkpoint
    from ..trained.restore import prompt_ids, restore

    if not args.prompt:
        raise ConfigError("--prompt", "is empty; give the text to continue or translate")
    if args.strategy not in STRATEGIES:  # before any warning about the options it would use
        raise choice_error("--strategy", "strategy", args.strategy, STRATEGIES)
    pick = best_run(args.run) if args.best else None
    with warnings.catch_warnings(record=True) as caught:  # a changed plugin: one line, not a warnings trace
        cfg, model, tokenizer = restore(pick.checkpoint if pick else checkpoint(args.run, best=False))
    if pick:  # once it loaded: a user mistake stays one line
        print(f"arch-zoo: --best: {pick.line()}", file=sys.stderr)
    for w in caught:
        warn(str(w.message))
    ids = prompt_ids(cfg, tokenizer, args.prompt)
    if not ids:
        raise ConfigError("--prompt", f"'{args.prompt}' has no tokens under the run's tokenizer")
    unknown = unknown_pieces(tokenizer, args.prompt)
    if unknown:
        warn(f"--prompt: {', '.join(map(repr, unknown))} not in the run's vocabulary; encoded as the unknown token")
    ignored = [flag for flag, value, used_by in _STRATEGY_OPTIONS
               if getattr(args, value) is not None and args.strategy not in used_by]
    if ignored:
        warn(f"{', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect with --strategy "
              f"{args.strategy}")
    extra = {"sample": dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p),
             "beam": dict(beams=args.beams)}.get(args.strategy, {})
    start = decoder_start_id(tokenizer) if kind_of(cfg.model).cross_attention else None
    try:
        out = generate(model, [ids], strategy=args.strategy, max_new_tokens=args.max_new_tokens,
                       eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id, seed=args.seed,
                       decoder_start_token_id=start, compile=args.compile, tokenizer_size=tokenizer.vocab_size,
                       **{k: v for k, v in extra.items() if v is not None})
    except ConfigError as exc:  # the API's argument names -> this command's flags
        flag = {dest: flag for flag, dest, _ in _STRATEGY_OPTIONS + (("--max-new-tokens", "max_new_tokens", ()),
                                                                     ("--compile", "compile", ()))}
        raise ConfigError(flag.get(exc.key, exc.key), exc.message) from None
    print(tokenizer.decode(out.to_lists()[0][0]))
    if args.compile:
        from ..generation.compiled import last_compiled

        step = last_compiled(model)
        if step is not None and step.compile_s is not None:  # None: it ended before a second token
            warn(f"--compile: the decode step compiled in {step.compile_s:.1f} s (batch {step.cache.batch}, "
                 f"{step.cache.columns} cache columns); one short generation rarely repays that, so eager is "
                 "the default")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt (or translate a source) with a trained run")
    p.add_argument("run", metavar="RUN_DIR_OR_CKPT", help="a run directory or one of its checkpoints "
                   "(checkpoints/last.ckpt, checkpoints/best.ckpt); with --best, a sweep's store")
    p.add_argument("--best", action="store_true", help="RUN is a sweep's store (OUT/<sweep name>): use its best "
                   "completed run by the sweep's metric and goal, at that run's best checkpoint (it says which)")
    p.add_argument("--prompt", required=True, help="the text; encoded with the run's own tokenizer")
    p.add_argument("--strategy", default="greedy", help="greedy, sample or beam")
    p.add_argument("--temperature", type=float, default=None, help="sample: softmax temperature")
    p.add_argument("--top-k", type=int, default=None, help="sample: keep the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="sample: keep the smallest set reaching p")
    p.add_argument("--beams", type=int, default=None, help="beam: beam size (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=None, help="seed for sampling")
    p.add_argument("--compile", action="store_true", help="decode through a static cache and one compiled step "
                   "(CUDA graphs on GPU); pays for long generations, not for a short one (it says the compile time)")
    p.set_defaults(func=_generate)
