"""The schedule arithmetic, checked against the source article's numbers."""

import pytest
from hypothesis import given, strategies as st

from grpo_edu.core.schedule import TrainingSchedule


def test_word_memorisation_analogy():
    # 1000 words, 10 at a time, 15 passes
    s = TrainingSchedule(dataset_size=1000, batch_size=10, num_generations=8, total_epochs=15)
    assert s.steps_per_epoch == 100
    assert s.total_steps == 1500
    assert s.stop_reason == "total_epochs"
    assert s.epochs_completed == 15.0


def test_seed_worked_example():
    # 2000 prompts, batch 4, G 8, total_training_steps 1000 → 2 epochs
    s = TrainingSchedule(dataset_size=2000, batch_size=4, num_generations=8,
                         total_epochs=15, total_training_steps=1000)
    assert s.steps_per_epoch == 500
    assert s.completions_per_step == 32
    assert s.total_steps == 1000
    assert s.stop_reason == "total_training_steps"
    assert s.epochs_completed == 2.0
    assert s.epoch_of(1) == 1 and s.epoch_of(500) == 1 and s.epoch_of(501) == 2 and s.epoch_of(1000) == 2


def test_stop_reason_whichever_first():
    s = TrainingSchedule(dataset_size=100, batch_size=10, num_generations=4, total_epochs=2,
                         total_training_steps=50)
    assert (s.total_steps, s.stop_reason) == (20, "total_epochs")
    tie = TrainingSchedule(dataset_size=100, batch_size=10, num_generations=4, total_epochs=2,
                           total_training_steps=20)
    assert (tie.total_steps, tie.stop_reason) == (20, "total_training_steps")
    only_steps = TrainingSchedule(dataset_size=100, batch_size=10, num_generations=4, total_training_steps=35)
    assert only_steps.epochs_completed == 3.5 and only_steps.epoch_of(35) == 4


def test_incomplete_batch_is_dropped():
    s = TrainingSchedule(dataset_size=1000, batch_size=64, num_generations=8, total_epochs=1)
    assert s.steps_per_epoch == 15
    assert s.dropped_per_epoch == 40


def test_gradient_accumulation():
    s = TrainingSchedule(dataset_size=2000, batch_size=4, num_generations=8, total_training_steps=10,
                         micro_batch_size=8)
    assert s.gradient_accumulation_steps == 4
    assert TrainingSchedule(dataset_size=20, batch_size=4, num_generations=8,
                            total_training_steps=1).gradient_accumulation_steps == 1


@pytest.mark.parametrize("kwargs, arg", [
    (dict(dataset_size=100, batch_size=4, num_generations=1, total_epochs=1), "num_generations"),
    (dict(dataset_size=100, batch_size=0, num_generations=4, total_epochs=1), "batch_size"),
    (dict(dataset_size=100, batch_size=101, num_generations=4, total_epochs=1), "batch_size"),
    (dict(dataset_size=100, batch_size=4, num_generations=4), "total_epochs/total_training_steps"),
    (dict(dataset_size=100, batch_size=4, num_generations=8, total_epochs=1, micro_batch_size=5), "micro_batch_size"),
    (dict(dataset_size=100, batch_size=4, num_generations=8, total_epochs=0), "total_epochs"),
    (dict(dataset_size=100, batch_size=4, num_generations=8, total_training_steps=-3), "total_training_steps"),
    (dict(dataset_size=0, batch_size=4, num_generations=8, total_epochs=1), "dataset_size"),
    (dict(dataset_size=100, batch_size=4.0, num_generations=8, total_epochs=1), "batch_size"),
])
def test_bad_input_names_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=f"^{arg}: .*Fix: "):
        TrainingSchedule(**kwargs)


def test_epoch_of_out_of_range():
    s = TrainingSchedule(dataset_size=100, batch_size=10, num_generations=4, total_epochs=1)
    for bad in (0, 11):
        with pytest.raises(ValueError, match="^step: "):
            s.epoch_of(bad)


@given(n=st.integers(1, 5000), b=st.integers(1, 64), g=st.integers(2, 16),
       epochs=st.none() | st.integers(1, 20), steps=st.none() | st.integers(1, 3000))
def test_schedule_invariants(n, b, g, epochs, steps):
    if b > n or (epochs is None and steps is None):
        return
    s = TrainingSchedule(dataset_size=n, batch_size=b, num_generations=g, total_epochs=epochs,
                         total_training_steps=steps)
    assert s.steps_per_epoch * b + s.dropped_per_epoch == n
    assert s.total_steps == min(x for x in (steps, None if epochs is None else epochs * s.steps_per_epoch)
                                if x is not None)
    assert s.epoch_of(s.total_steps) == -(-s.total_steps // s.steps_per_epoch)  # ceil
    assert s.epochs_completed == pytest.approx(s.total_steps / s.steps_per_epoch)
    assert s.summary()["total_steps"] == s.total_steps


def test_learning_rate_schedules():
    from grpo_edu.core.schedule import learning_rate_at

    assert learning_rate_at(1, 100, 3e-4) == 3e-4                              # full rate at step 1
    assert learning_rate_at(51, 100, 3e-4) == pytest.approx(1.5e-4)            # half way: half
    assert learning_rate_at(100, 100, 3e-4) == pytest.approx(3e-6)             # last step: lr / total
    assert [learning_rate_at(s, 10, 1.0, "constant") for s in (1, 5, 10)] == [1.0, 1.0, 1.0]
    for args, name in (((0, 10, 1.0), "step"), ((11, 10, 1.0), "step"), ((1, 0, 1.0), "total_steps")):
        with pytest.raises(ValueError, match=f"^{name}:"):
            learning_rate_at(*args)
    with pytest.raises(ValueError, match="^schedule:"):
        learning_rate_at(1, 10, 1.0, "cosine")


def test_the_trainer_applies_the_schedule(random_model, char_tokenizer):
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(10, 30)]
    t = GRPOTrainer(GRPOConfig(batch_size=2, num_generations=2, total_training_steps=4, eval_size=0,
                               learning_rate=1e-3), model=random_model, tokenizer=char_tokenizer, train_rows=rows)
    seen = []
    t.callbacks.append(lambda m: seen.append(t.optimizer.param_groups[0]["lr"]))
    t.train(progress=False)
    assert seen == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])


def test_resuming_with_a_new_length_warns_under_the_linear_schedule(random_model, char_tokenizer, tmp_path):
    from grpo_edu.training.trainers.config import GRPOConfig
    from grpo_edu.training.trainers.trainer import GRPOTrainer

    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(10, 30)]
    common = dict(batch_size=2, num_generations=2, eval_size=0, output_dir=str(tmp_path / "run"))
    GRPOTrainer(GRPOConfig(total_training_steps=2, **common), model=random_model, tokenizer=char_tokenizer,
                train_rows=rows).train(progress=False)
    longer = GRPOTrainer(GRPOConfig(total_training_steps=3, **common), model=random_model,
                         tokenizer=char_tokenizer, train_rows=rows)
    with pytest.warns(UserWarning, match="planned for 2 steps and now has 3"):
        longer.load_checkpoint(tmp_path / "run")
