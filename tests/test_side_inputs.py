"""The side-input table: what models and criterions declare decides what the task loads,
what the batch carries (model inputs in net_input, alignments at sample level) and what
the encoder passes on."""
import argparse

import pytest
import torch
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

from conftest import TINY_MODEL, USER_DIR
from fairseq_syntax.data import side_inputs
from fairseq_syntax.data.side_inputs import SIDE_INPUTS

pytestmark = pytest.mark.usefixtures("one_thread")

PLAIN = {"src_tokens", "src_lengths", "prev_output_tokens"}


def test_table_closures_and_keys():
    assert list(SIDE_INPUTS) == ["heads", "words", "distances", "tree", "alignments"]
    assert len({spec.key for spec in SIDE_INPUTS.values()}) == len(SIDE_INPUTS)
    assert [n for n, spec in SIDE_INPUTS.items() if spec.target] == ["alignments"]
    assert side_inputs.requested({"distances"}) == {"distances", "heads"}
    assert side_inputs.carried({"distances"}) == {"distances", "heads", "words"}
    assert side_inputs.carried({"tree", "alignments"}) == {"tree", "alignments"}
    assert side_inputs.model_input_keys({"alignments", "tree", "heads"}) == ("src_heads", "src_tree")
    with pytest.raises(ValueError, match=r"Foo declares unknown side inputs \['parse'\]"):
        side_inputs.checked({"tree", "parse"}, "Foo")


def test_every_plugin_model_declares_with_the_class_method():
    from fairseq.criterions import CRITERION_REGISTRY

    expected = {"tree2seq": {"tree"}, "sdatt_syntax": {"distances"},
                "sdatt_double_syntax": {"distances"}, "pascal_transformer_tiny": {"heads", "words"},
                "sdatt_transformer_tiny": {"distances"}, "sa_transformer_tiny": set(),
                "tree2seq_transformer_tiny": {"tree"},
                "sdatt_local_p": set(), "attentional_rnn": set(), "sa_nmt": set()}
    seen = set()
    for arch, cls in ARCH_MODEL_REGISTRY.items():
        if not cls.__module__.startswith("fairseq_syntax."):
            continue
        assert not hasattr(cls, "syntax_inputs"), cls
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](args)
        declared = side_inputs.declared_by(cls, args)
        assert declared <= {n for n, s in SIDE_INPUTS.items() if not s.target}, arch
        if arch in expected:
            assert declared == expected[arch], arch
            seen.add(arch)
    assert seen == set(expected)
    criterion = CRITERION_REGISTRY["supervised_attention_cross_entropy"]
    assert side_inputs.declared_by(criterion, None) == {"alignments"}
    assert side_inputs.declared_by(CRITERION_REGISTRY["cross_entropy"], None) == set()


def _task(databin, argv):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(databin), "--user-dir", USER_DIR, "--task", "syntax_translation", *TINY_MODEL,
        *argv])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    return task, model, criterion, dataset.collater([dataset[i] for i in range(8)])


def test_a_model_declaring_tree_gets_src_tree_and_nothing_else(synthetic_databin):
    task, model, _, batch = _task(synthetic_databin, ["--arch", "tree2seq"])
    assert task.requested_inputs == {"tree"}
    assert set(batch["net_input"]) == PLAIN | {"src_tree"}
    assert "alignment_links" not in batch
    net = batch["net_input"]
    out = model.encoder(net["src_tokens"], net["src_lengths"], src_tree=net["src_tree"],
                        src_heads=torch.zeros_like(net["src_tokens"]))
    assert out["src_tree"] is net["src_tree"] and "src_heads" not in out


def test_distances_come_with_heads_and_words_and_the_encoder_keeps_distances(synthetic_databin):
    task, model, _, batch = _task(synthetic_databin, ["--arch", "sdatt_syntax"])
    assert task.requested_inputs == {"distances", "heads"}  # the log line's list
    net = batch["net_input"]
    assert set(net) == PLAIN | {"src_heads", "src_words", "src_distances"}
    out = model.encoder(**{k: v for k, v in net.items() if k != "prev_output_tokens"})
    assert [k for k in out if k.startswith("src_")] == ["src_distances"]


def test_alignments_are_a_sample_level_target(synthetic_databin):
    task, model, criterion, batch = _task(synthetic_databin, [
        "--arch", "attentional_rnn", "--criterion", "supervised_attention_cross_entropy"])
    assert task.requested_inputs == {"alignments"}
    assert set(batch["net_input"]) == PLAIN
    # the criterion reads alignment_links: fairseq's own per-sentence copy is not built
    assert "alignments" not in batch and "align_weights" not in batch
    links = batch["alignment_links"]
    aligns = task.dataset("valid").alignments
    for row, i in enumerate(batch["id"].tolist()):
        want = aligns[i].view(-1, 2)
        assert torch.equal(links[row, : len(want)], want)
        assert links[row, len(want):].eq(-1).all()
    model.train()
    _, _, log = criterion(model, batch)
    assert log["alignment_rows"] == int(batch["target"].ne(1).sum())


def test_fairseqs_alignment_criterion_gets_fairseqs_alignments(synthetic_databin):
    """No plugin reader declares the alignments of --load-alignments: fairseq's own
    ``alignments`` (target positions offset into the flattened batch) and
    ``align_weights`` come too."""
    task, _, _, batch = _task(synthetic_databin, [
        "--arch", "attentional_rnn", "--load-alignments",
        "--criterion", "label_smoothed_cross_entropy_with_alignment"])
    links = batch["alignment_links"]
    real = links[..., 0].ge(0)
    rows = real.nonzero()[:, 0]
    offsets = torch.stack([torch.zeros_like(rows), rows * batch["target"].size(1)], dim=1)
    assert torch.equal(batch["alignments"], links[real] + offsets)
    # each link weighs 1 / (the links of its target position)
    target = batch["alignments"][:, 1]
    assert torch.equal(batch["align_weights"],
                       1.0 / (target[:, None] == target[None, :]).sum(1).float())


def test_a_side_file_that_the_batch_needs_must_be_given():
    from fairseq_syntax.data.syntax_dataset import SyntaxLanguagePairDataset
    from model_utils import tiny_dictionary

    d = tiny_dictionary()
    src = [torch.tensor([4, 5, d.eos()])]
    heads = [torch.tensor([1, -1, 1])]
    with pytest.raises(ValueError, match="need the words side-files"):
        SyntaxLanguagePairDataset(src, [3], d, left_pad_source=False, heads=heads,
                                  inputs={"distances"}, split="test")
    ds = SyntaxLanguagePairDataset(src, [3], d, left_pad_source=False, heads=heads,
                                   words=[torch.tensor([0, 1, -1])], inputs={"heads"})
    batch = ds.collater([ds[0]])
    assert set(batch["net_input"]) == {"src_tokens", "src_lengths", "src_heads"}
