"""SCOPE's rubric path for SPICE (`method.rubric`): a frozen judge for answers the executor cannot
verify.

The judge is a frozen copy of the run's initial model (or `rubric.judge_model`), loaded once
as an `engines.hf.HFEngine` of its own and never updated. It writes one rubric per document
from the document itself (cached in the run state, so a resume reuses it) and grades an answer
against that rubric, greedily; the grade is read tolerantly (`roles.spice.parse_grade`), and an
unreadable grade is a fail (counted).

* Open-ended tasks: "explain what this function does", shown the document's code without its
  docstring; the Reasoner's explanations pass when the judge grades them >= `pass_score`. They
  join the student batch as kind `spice_explain` (Dr. GRPO per task).
* Agreement: the judge also grades the Reasoner's programs for executor-verified SPICE tasks;
  `agreement_stats` compares its verdicts with the executor's (share agreeing, Cohen's kappa).
"""

from __future__ import annotations

from selfplay_core import stages as S
from selfplay_core.engines.base import SamplingParams
from selfplay_core.problems import Problem
from selfplay_core.records import IterationLog
from selfplay_core.roles import spice as role
from selfplay_core.roles.common import Rejection
from selfplay_core.solve import SolveResult

EXPLAIN_KIND = "spice_explain"


def agreement_stats(judge: list[bool | None], executor: list[bool]) -> dict[str, float]:
    """Judge verdicts (None: unreadable grade) against the executor's on the same answers:
    `agreement` over the readable ones, `agreement_all` counting unreadable as a fail,
    `kappa` (Cohen's, readable ones; 0 when chance agreement is 1), `parse_rate`, and each
    side's pass share."""
    if len(judge) != len(executor):
        raise ValueError(f"{len(judge)} judge verdicts but {len(executor)} executor verdicts")
    n = len(judge)
    if n == 0:
        return {}
    read = [(j, e) for j, e in zip(judge, executor) if j is not None]
    out = {"pairs": float(n), "parse_rate": len(read) / n,
           "executor_pass": sum(executor) / n,
           "agreement_all": sum((j is True) == e for j, e in zip(judge, executor)) / n}
    if read:
        m = len(read)
        agree = sum(j == e for j, e in read) / m
        pj = sum(j for j, _ in read) / m
        pe = sum(e for _, e in read) / m
        chance = pj * pe + (1 - pj) * (1 - pe)
        out.update(agreement=agree, judge_pass=pj,
                   kappa=0.0 if chance >= 1.0 else (agree - chance) / (1.0 - chance))
    return out


def fits(engine, prompt: str, max_new: int) -> bool:
    tok = getattr(engine, "tokenizer", None)
    limit = getattr(engine, "max_length", None)
    if tok is None or not limit:
        return True
    return len(tok(prompt, add_special_tokens=False)["input_ids"]) + max_new <= limit


class Judge:
    def __init__(self, engine, config, rubrics: dict):
        self.engine = engine
        self.config = config
        self.rubrics = rubrics   # doc id -> rubric text (the run state's, so it is saved)

    @classmethod
    def for_run(cls, ctx, config) -> "Judge":
        """The frozen judge: `judge_model`, else the weights the run *started* from (kept in
        the run state, so after a resume the judge is still the initial model, not the
        checkpoint the policy resumes from)."""
        from selfplay_core.engines.hf import HFEngine
        import torch

        st = ctx.state.method_state.setdefault("scope", {})
        path = config.judge_model or st.get("judge_model") or str(ctx.model_dir)
        st["judge_model"] = path
        engine = HFEngine(path, batch_size=ctx.config.engine.batch_size,
                          dtype=getattr(torch, ctx.config.model.dtype))
        return cls(engine, config, st.setdefault("rubrics", {}))

    def _greedy(self, max_new: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_new_tokens=max_new, stop=role.JUDGE_STOP)

    def rubric_for(self, docs) -> dict[str, str]:
        """Rubrics of `docs`, written once per document by the frozen judge."""
        c = self.config
        todo = [d for d in docs if d.id not in self.rubrics
                and fits(self.engine, role.rubric_prompt(d), c.max_new_tokens_rubric)]
        if todo:
            outs = self.engine.generate([role.rubric_prompt(d) for d in todo], 1,
                                        self._greedy(c.max_new_tokens_rubric))
            for d, comps in zip(todo, outs):
                self.rubrics[d.id] = role.clean_answer(comps[0].text)
        # An empty rubric (or a document too long for the judge) grades against the docstring.
        return {d.id: self.rubrics.get(d.id) or d.description for d in docs}

    def grade(self, items: list[tuple[str, str, str]]) -> list[bool | None]:
        """(rubric, task, answer) -> pass / fail / None (grade unreadable, or too long to ask)."""
        c = self.config
        prompts = [role.grade_prompt(r, t, a) for r, t, a in items]
        ok = [i for i, p in enumerate(prompts) if fits(self.engine, p, c.max_new_tokens_grade)]
        out: list[bool | None] = [None] * len(items)
        if ok:
            comps = self.engine.generate([prompts[i] for i in ok], 1, self._greedy(c.max_new_tokens_grade))
            for i, cs in zip(ok, comps):
                g = role.parse_grade(cs[0].text)
                out[i] = None if isinstance(g, Rejection) else g >= c.pass_score
        return out

    # ---- the two uses -------------------------------------------------------------------------
    def solve_explain(self, ctx, docs, log: IterationLog) -> list[tuple[str, SolveResult]]:
        """The Reasoner explains each document's code (docstring removed); the judge grades."""
        n = ctx.config.student.samples_per_task
        tasks = [(d, role.explain_prompt(role.strip_docstring(d.source, d.entry_point))) for d in docs]
        tasks = [(d, p) for d, p in tasks if fits(ctx.engine, p, ctx.config.engine.max_new_tokens_student)]
        if not tasks:
            return []
        groups = ctx.engine.generate([p for _, p in tasks], n, S.student_sampling(ctx, stop=role.JUDGE_STOP))
        rubrics = self.rubric_for([d for d, _ in tasks])
        items = [(rubrics[d.id], p, role.clean_answer(c.text)) for (d, p), cs in zip(tasks, groups) for c in cs]
        verdicts = self.grade(items)
        out = []
        for k, ((d, prompt), cs) in enumerate(zip(tasks, groups)):
            v = verdicts[k * n:(k + 1) * n]
            prob = Problem(id=f"it{ctx.state.iteration}/{EXPLAIN_KIND}/{d.id}", kind="call",
                           tests=[], prompt=prompt, entry_point=d.entry_point,
                           metadata={"document": d.id, "kind": EXPLAIN_KIND})
            out.append((EXPLAIN_KIND, SolveResult(prob, cs, [x is True for x in v],
                                                  [None if x is True else ("unparsed_grade" if x is None else "judged_wrong")
                                                   for x in v])))
        n_all = len(verdicts)
        log.add(**{"scope/explain/tasks": len(out),
                   "scope/explain/pass_rate": sum(x is True for x in verdicts) / n_all,
                   "scope/explain/parse_rate": sum(x is not None for x in verdicts) / n_all})
        return out

    def agreement(self, ctx, proposals, docs: dict, log: IterationLog) -> dict:
        """Grade up to `agreement_samples` executor-verified Reasoner programs; log how often the
        judge agrees with the executor (scope/judge/*)."""
        pairs = [(p, c, ok) for p in proposals for c, ok in zip(p.solve.completions, p.solve.passed)]
        k = min(self.config.agreement_samples, len(pairs))
        if k == 0:
            return {}
        picked = ctx.rng.sample(pairs, k)
        rubrics = self.rubric_for([docs[p.anchor.id] for p, _, _ in picked])
        items = [(rubrics[p.anchor.id], p.problem.prompt,
                  f"{docs[p.anchor.id].signature}\n{role.clean_answer(c.text)}") for p, c, _ in picked]
        stats = agreement_stats(self.grade(items), [bool(ok) for _, _, ok in picked])
        log.add(**{f"scope/judge/{k}": v for k, v in stats.items()})
        return stats
