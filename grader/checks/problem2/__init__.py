"""Problem 2 checks (pipeline parallelism): one folder per concept, ``observe.py`` (the child:
runs the student's code, records) and ``judge.py`` (the parent: expected values, messages).

=========================  ==========================================  ==========================
criterion                  check (``grader/rubric.toml``)              folder
=========================  ==========================================  ==========================
2.1-schedule               ``problem2.clock_cycles:schedule``          ``clock_cycles/``
2.1-stage-order            ``problem2.clock_cycles:stage_order``       ``clock_cycles/``
2.1-generator              ``problem2.clock_cycles:generator``         ``clock_cycles/`` (+ ``work.py``)
2.1-no-microbatches        ``problem2.clock_cycles:no_microbatches``   ``clock_cycles/``
2.1-errors                 ``problem2.clock_cycles:errors``            ``clock_cycles/``
2.2-forward                ``problem2.pipe_forward:forward``           ``pipe_forward/``
2.2-input-unchanged        ``problem2.pipe_forward:input_unchanged``   ``pipe_forward/``
2.2-call-order             ``problem2.pipe_call_order:call_order``     ``pipe_call_order/``
2.2-no-grad                ``problem2.pipe_grad:no_grad``              ``pipe_grad/``
2.2-backward               ``problem2.pipe_grad:backward``             ``pipe_grad/`` (+ ``training.py``)
2.2-exceptions             ``problem2.pipe_errors:exceptions``         ``pipe_errors/``
2.2-exception-unchanged    ``problem2.pipe_errors:exception_unchanged`` ``pipe_errors/``
2.2-base-exception         ``problem2.pipe_errors:base_exception``     ``pipe_errors/``
2.2-concurrency            ``problem2.pipe_concurrency:concurrency``   ``pipe_concurrency/``
2.2-transfers              ``problem2.pipe_transfers:transfers``       ``pipe_transfers/``
2.3-speedup                ``problem2.speedup:speedup``                ``speedup/`` (needs 2 GPUs)
2.4-balance                ``problem2.balance:balance``                ``balance/`` (+ ``expected.py``)
2.4-arguments              ``problem2.balance:balance_arguments``      ``balance/``
=========================  ==========================================  ==========================

Each folder's ``cases.py`` holds the cases both sides share (the child makes exactly these calls,
the parent judges exactly these). Shared by every folder: ``stages.py`` (the grader's own stages
and batches), ``pieces.py`` (child: the grader's ``clock_cycles``, put into the student's module
only on a 2.2 criterion's second run, see ``fallback`` in the rubric), ``cpu_cut.py`` (child: a
call bounded in CPU time), ``recorded.py`` (child: numbers recorded by value, their types apart). Parent only: ``expected.py`` (the GPipe schedule, the calls it implies,
the stages in sequence) and ``judge_pipe.py`` (what every 2.2 judge says the same way).
"""
