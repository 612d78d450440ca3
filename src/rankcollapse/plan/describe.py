"""What the report says of each experiment's runs: its size line, read from the config. Named by
the experiment registry (an experiment's method note is its claims module's `method_note`)."""

from __future__ import annotations

from rankcollapse.plan.tuned import HALVING, grid_arms, grid_budgets, grid_depths, rung_plan
from rankcollapse.plan.tuned import grid as sweep_grid


def _size(value) -> int:
    return len(value) if isinstance(value, list | tuple | dict) else int(value)


def _list(values) -> str:
    return ", ".join(str(v) for v in values)


def depth_grid(c: dict) -> str:
    """The depth grid: its arms, budgets, sweep members and final seeds per arm."""
    g = c["depth_grid"]
    arms = grid_arms(c)
    settings = len(sweep_grid({k: g[k] for k in ("lr", "warmup", "weight_decay")}))
    depths = "; ".join(f"{t} depths {_list(grid_depths(g, t))}" for t in g["tasks"])
    halving = {**HALVING, **g.get("halving", {})}
    method = g.get("tuning", "grid")
    seeds = _size(g["tuning_seeds"])
    plan = rung_plan(settings, halving["eta"] ** (halving["rungs"] - 1),
                     {"method": method, **halving}, seeds)
    full = halving["eta"] ** (halving["rungs"] - 1) if method == "halving" else 1
    swept = sum(r["settings"] * r["seeds"] for r in plan)
    rungs = []
    for i, r in enumerate(plan):
        where = f"1/{full // r['budget']}" if r["budget"] < full else "the full budget"
        on = f" on {r['seeds']} seed(s)" if r["seeds"] != seeds else ""
        rungs.append(f"{r['settings']} settings at {where}{on}" if not i
                     else f"{r['settings']} at {where}{on}")
    how = ("every setting trained to the full budget (grid)" if method == "grid" else
           f"successive halving (eta {halving['eta']}, rungs at fractions of the budget: "
           f"{', '.join(rungs)})")
    budgets = grid_budgets(g)
    steps = (f"{next(iter(budgets.values()))} steps" if len(set(budgets.values())) == 1 else
             "steps " + ", ".join(f"{s} at depth {d}" for d, s in budgets.items()))
    curve = g.get("budget_curve") or {}
    control = (f"; {curve['control']} at each task's deepest depth to twice its budget where "
               "the curve stops short of it"
               if curve.get("control") else "")
    curve_line = (f"; the fresh seeds also at budgets {_list(curve['budgets'])} (cool-downs "
                  f"of one warmup-stable-decay run; {_list(curve.get('variants', []))} up to "
                  f"the longest, the others up to their own{control})"
                  if curve.get("budgets") else "")
    return (f"{len(arms)} tuned arms ({_list(g['tasks'])} × {_size(g['variants'])} variants; "
            f"{depths}; placements {_list(g.get('placements', [])) or 'none'} at the deepest); "
            f"each a sweep of {settings} settings × {_size(g['tuning_seeds'])} tuning seed(s), "
            f"{how}, selected by mean validation {g.get('select_by', 'loss')}, then "
            f"{_size(g['seeds'])} fresh seeds; {steps} of batch {g['batch']}{curve_line}: "
            f"{len(arms) * (swept + _size(g['seeds']))} trained networks")


def rival_fixes(c: dict) -> str:
    """The rival fixes, tuned as arms of the depth grid at the deepest depth of their task."""
    r, g = c["rival_fixes"], c["depth_grid"]
    deepest = grid_depths(g, r["task"])[-1]
    return (f"{_size(r['variants'])} rival fixes ({_list(r['variants'])}) tuned as arms of the "
            f"depth grid at {r['task']} depth {deepest}, beside its post_ln, pre_ln and "
            f"post_ln_deesc there; {_size(g['seeds'])} fresh seeds each")


def _grid(block: dict, *keys: str) -> int:
    total = 1
    for key in keys:
        total *= _size(block[key])
    return total


def init_sweep(c: dict) -> str:
    """The init sweep: variants x seeds of random networks."""
    return (f"{_size(c['init_sweep']['variants'])} variants × {_size(c['init_sweep']['seeds'])} "
            f"seeds; depth {c['init_sweep']['depth']}, width {c['init_sweep']['width']}, "
            f"{c['init_sweep']['heads']} heads, n = {c['init_sweep']['tokens']} tokens, "
            f"{c['init_sweep']['batch']} sequences per network")


def realarch(c: dict) -> str:
    """The realarch block: real architectures x seeds, with their ablations."""
    return (f"{_list(c['realarch']['models'])} × {_size(c['realarch']['seeds'])} seeds; "
            f"{_size(c['realarch']['ablations'])} ablations; {c['realarch']['batch']} sequences "
            f"of {c['realarch']['tokens']} tokens")


def paths(c: dict) -> str:
    """The paths block: trained networks and the path sampling."""
    return (f"{_grid(c['paths'], 'tasks', 'variants', 'depths', 'seeds')} trained networks "
            f"({_list(c['paths']['tasks'])} × {_list(c['paths']['variants'])} × depths "
            f"{_list(c['paths']['depths'])} × {_size(c['paths']['seeds'])} seeds; widths "
            + ", ".join(f"{t} {m['width']}" for t, m in c['paths'].get('models', {}).items())
            + f"), {c['paths']['train'].get('steps', c['train']['steps'])} steps each; sampled "
            f"paths summed {' and '.join(map(str, c['paths']['samples']))} at a time, "
            f"{c['paths']['repeats']} repeats, {c['paths']['eval_size']} evaluation examples")


def circle(c: dict) -> str:
    """The circle block: trained one-layer networks and their roll-outs."""
    return (f"{_grid(c['circle'], 'setups', 'widths', 'seeds')} trained layers "
            f"({_size(c['circle']['setups'])} set-ups × widths {_list(c['circle']['widths'])} × "
            f"{_size(c['circle']['seeds'])} seeds), {c['circle']['steps']} Adam steps at "
            f"{c['circle']['lr']:g} in batches of {c['circle']['batch']}, "
            f"{c['circle']['rollout']}-step roll-outs from {c['circle']['starts']} start pairs")


def escalation(c: dict) -> str:
    """The escalation block: trained networks of one depth."""
    return (f"{_grid(c['escalation'], 'variants', 'seeds')} trained networks of depth "
            f"{c['escalation']['depth']} on {c['escalation']['task']}; width "
            f"{c['train']['width']}, {c['train']['steps']} steps")


def particles(p: dict) -> str:
    """The particles block: one clause per study."""
    h, s, x, b, m = (p[k] for k in ("homogenization", "small_beta", "simplex", "large_beta",
                                   "maps"))
    return (f"homogenization over depths {_list(h['depths'])} ({h['runs']} runs each; heads "
            f"⌈L^{h['heads_exponent']:g}⌉ up to L = {max(h['heads_depths'])}); small "
            f"temperature d = {_list(s['d'])} × n = {_list(s['n'])}, {s['runs']} runs per cell; "
            f"simplex d = {_list(x['d'])}, {x['runs']} runs; large temperature d = "
            f"{_list(b['d'])}, {b['runs']} pairs; maps {_size(m['d'])} d and {_size(m['beta'])} "
            f"β × {_size(m['n'])} n, {m['runs']} runs per cell")
