import pytest

from selfplay_core.toyworld.corpus import CorpusSettings, build_corpus
from selfplay_core.toyworld.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(CorpusSettings(n_examples=1500), 0)


@pytest.fixture(scope="module")
def saved(corpus, tmp_path_factory):
    tok = train_tokenizer(corpus[:1000], vocab_size=640)
    path = tmp_path_factory.mktemp("tok")
    tok.save_pretrained(path)
    return tok, path


def test_vocab_size_and_special_token(saved):
    tok, _ = saved
    assert len(tok) == 640
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == "<|endoftext|>"
    assert tok.pad_token_id == tok.eos_token_id


def test_round_trips_the_corpus_including_unseen_texts(saved, corpus):
    tok, _ = saved
    for text in corpus:  # the last 500 were not used to train BPE
        assert tok.decode(tok(text)["input_ids"]) == text


def test_reloaded_tokenizer_gives_identical_ids(saved, corpus):
    from transformers import AutoTokenizer

    tok, path = saved
    again = AutoTokenizer.from_pretrained(path)
    assert again(corpus)["input_ids"] == tok(corpus)["input_ids"]


def test_one_token_per_digit(saved):
    tok, _ = saved
    toks = tok.convert_ids_to_tokens(tok("x = [v + 1234 for v in x]")["input_ids"])
    assert [t for t in toks if any(ch.isdigit() for ch in t)] == ["1", "2", "3", "4"]


def test_training_is_deterministic(corpus):
    a = train_tokenizer(corpus[:500], vocab_size=400)
    b = train_tokenizer(corpus[:500], vocab_size=400)
    assert a.get_vocab() == b.get_vocab()


def test_bad_vocab_size():
    with pytest.raises(ValueError):
        train_tokenizer(["abc"], vocab_size=10)
