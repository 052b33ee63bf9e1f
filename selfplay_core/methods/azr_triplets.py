"""AZR's deduction and abduction rounds: triplets (program, input, output).

The proposer sees K reference triplets from its type's buffer and writes a program and one
input; the executor runs it for the output (`stages.check_references`: in sandbox.gate_bits + 1
fresh processes, under the import allow-list). Deduction:
the student predicts the output from program and input (compared as data, in this process).
Abduction: the student gives an input from program and output, checked by running the program
on it in the sandbox in the gate's conditions (`Executor.verify_references`). Prompts and parsers: `roles.azr`.
"""

from __future__ import annotations

from selfplay_core import stages as S
from selfplay_core.methods.base import Round
from selfplay_core.problems import Problem, TestCase
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.roles import azr as azr_role
from selfplay_core.roles.common import Rejection, signature_of
from selfplay_core.solve import SolveResult
from selfplay_core.values import Digest


def triplet_kind(task_type: str) -> str:
    return f"azr_{task_type}"


def _fits(ctx, prompt: str, max_new_tokens: int, engine=None) -> bool:
    """Whether prompt + max_new_tokens fit the context of `engine` (default: the policy's)."""
    engine = ctx.engine if engine is None else engine
    limit = getattr(engine, "max_length", None)
    tok = ctx.proposer_tokenizer if engine is ctx.teacher_engine else ctx.tokenizer
    if not limit or tok is None:
        return True
    return len(tok(prompt, add_special_tokens=False)["input_ids"]) + max_new_tokens <= limit


class TripletRound(Round):
    """`n` deduction or abduction proposals, scored by `reward` (AZR's learnability)."""

    def __init__(self, task_type: str, n: int, config, reward: S.ProposerReward):
        if task_type not in ("deduction", "abduction"):
            raise ValueError(f"a triplet round is deduction or abduction, not {task_type!r}")
        self.task_type = task_type
        self.kind = triplet_kind(task_type)
        self.n = n
        self.config = config          # the AZR method's config section
        self.reward = reward

    def references(self, ctx, k: int) -> list[tuple[str, azr_role.Triplet]]:
        """K reference triplets (id, triplet) from the buffer of this task type; the identity
        triplet while that buffer is empty."""
        items = [b for b in ctx.buffers if b.kind == self.kind and b.inputs and b.outputs]
        if not items:
            seed = azr_role.parse_literal(self.config.seed_input).value
            return [("azr-seed", azr_role.Triplet.identity(seed))][: max(k, 1)]
        picked = ctx.rng.sample(items, min(k, len(items)))
        return [(b.id, azr_role.Triplet(b.code, list(b.inputs[0]), b.outputs[0])) for b in picked]

    def propose(self, ctx) -> list[Proposal]:
        """n proposer prompts, each with its own K references (as many as fit the context)."""
        e = ctx.config.engine
        plan = []
        for _ in range(self.n):
            refs = self.references(ctx, self.config.references)
            prompt = azr_role.proposer_prompt(self.task_type, [t for _, t in refs])
            while len(refs) > 1 and not _fits(ctx, prompt, e.max_new_tokens_teacher, ctx.proposer):
                refs = refs[:-1]
                prompt = azr_role.proposer_prompt(self.task_type, [t for _, t in refs])
            first = refs[0] if refs else ("azr-seed", None)
            anchor = Anchor(first[0], "", first[1].program if first[1] else azr_role.IDENTITY_PROGRAM)
            plan.append((anchor, prompt))
        if not plan:
            return []
        sp = S.teacher_sampling(ctx, stop=azr_role.STOP)
        groups = ctx.proposer.generate([p for _, p in plan], 1, sp)
        return [Proposal(self.kind, a, "", "propose", prompt, comps[0],
                         id=f"it{ctx.state.iteration}/{self.kind}/{ctx.next_id()}",
                         temperature=sp.temperature)
                for (a, prompt), comps in zip(plan, groups)]

    def validate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """Parse (a program and one input literal), then gate (`stages.check_references`):
        allowed imports at run time, the program runs in time and gives the same output in two
        processes, also on other triplets' inputs; the output is a literal a student could
        write (not too large), the student's prompt fits the model, and the task is not a
        near-duplicate of this type's buffer or a batch-mate (or an evaluation item)."""
        a = self.config
        reasons: dict[str, int] = {}
        reject = S.rejector(reasons)
        todo = []
        for p in proposals:
            p.parsed = azr_role.parse_proposal(p.completion.text, max_chars=a.max_literal_chars)
            if isinstance(p.parsed, Rejection):
                reject(p, f"parse_{p.parsed.reason}")
                continue
            prob = Problem(id=p.id, kind="call", entry_point="f",
                           tests=[TestCase(args=list(p.parsed.args), has_expected=False)],
                           time_limit_s=1.0, memory_limit_mb=256)
            todo.append((p, prob))
        batch_texts: list[str] = []
        # The proposed input alone cannot show nondeterminism that other inputs would: the
        # other triplets' inputs of the same arity run as extra probes.
        checks = S.check_references(ctx, [(prob, p.parsed.code) for p, prob in todo])
        for (p, prob), (outputs, bad) in zip(todo, checks):
            if bad:
                reject(p, bad)
                continue
            out = outputs[0]
            why = (Rejection(azr_role.TOO_LARGE) if type(out) is Digest
                   else azr_role.is_literal_value(out, a.max_literal_chars))
            if why is not None:
                reject(p, f"output_{why.reason}")
                continue
            prompt = azr_role.solver_prompt(self.task_type, p.parsed.code, p.parsed.args, out)
            if not _fits(ctx, prompt, ctx.config.engine.max_new_tokens_student):
                reject(p, "too_long")
                continue
            text = f"{p.parsed.code}\n{azr_role.show_input(p.parsed.args)}"
            if ctx.config.teacher.rejection_sampling:
                if ctx.buffers.is_near_duplicate(text, batch_texts, kinds=(self.kind,))[0]:
                    reject(p, "near_duplicate")
                    continue
            # Code only (no question here): a weaker gate than for induction proposals.
            if ctx.contamination.is_near_duplicate(f"\n{p.parsed.code}")[0]:
                reject(p, "eval_contamination")
                continue
            batch_texts.append(text)
            prob.tests = [TestCase(args=list(p.parsed.args), expected=out)]
            prob.prompt = prompt
            prob.metadata = {"reference": p.parsed.code, "azr_type": self.task_type,
                             "n_params": p.parsed.n_params, "dedupe_text": text,
                             "signature": signature_of(p.parsed.code, "f")}
            p.problem = prob
        S.log_acceptance(log, self.kind, proposals, reasons)

    def estimate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        """n student samples per accepted task. Deduction: the predicted literal equals the
        output (typed comparison, in this process: it is data). Abduction: the program, run in
        the sandbox on the student's input, gives the output. Unparseable answers fail."""
        acc = [p for p in proposals if p.accepted]
        if not acc:
            return
        n = ctx.config.student.samples_per_task
        sp = S.student_sampling(ctx, stop=azr_role.ANSWER_STOP)
        groups = ctx.engine.generate([p.problem.prompt for p in acc], n, sp)
        want = "output" if self.task_type == "deduction" else "input"
        answers = [[azr_role.parse_answer(c.text, want) for c in comps] for comps in groups]
        if self.task_type == "deduction":
            passed = [[azr_role.check_deduction(ans, p.problem.tests[0].expected) for ans in row]
                      for p, row in zip(acc, answers)]
        else:
            flat = [(p.problem.metadata["reference"], ans, p.problem.metadata["n_params"],
                     p.problem.tests[0].expected) for p, row in zip(acc, answers) for ans in row]
            ok = azr_role.check_abductions(ctx.executor, flat, allowed_imports=S.ALLOWED_IMPORTS)
            passed = [ok[i * n:(i + 1) * n] for i in range(len(acc))]
        parsed = 0
        for p, comps, row, oks in zip(acc, groups, answers, passed):
            # ok is None where the sandbox could not run an abduction check (harness error)
            rej = [a.reason if isinstance(a, Rejection) else
                   ("harness_error" if ok is None else None if ok else "wrong_answer")
                   for a, ok in zip(row, oks)]
            parsed += sum(not isinstance(a, Rejection) for a in row)
            r = SolveResult(p.problem, comps, [bool(ok) for ok in oks], rej, [ok is None for ok in oks])
            if not S.has_pass_rate(p, r):
                continue
            p.solve = r
            p.pass_rate = r.c / r.n
        log.add(**{f"student/{self.kind}/parsed": parsed / (n * len(acc))})

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.score(ctx, proposals, self.reward, log)
