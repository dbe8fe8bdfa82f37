"""The Guacamole instruction codec: lengths in code points, split reads, guacd's limits."""

from __future__ import annotations

import pytest

from deskpool.guacamole import (
    MAX_ELEMENTS,
    MAX_LENGTH,
    Instruction,
    InstructionParser,
    ProtocolError,
    Status,
    encode,
)
from deskpool.guacamole.instruction import Utf8Decoder


def test_encode_counts_code_points_not_bytes() -> None:
    assert encode("select", "vnc") == "6.select,3.vnc;"
    assert encode("key", 65307, 1) == "3.key,5.65307,1.1;"
    assert encode("", "ping", "1700000000000") == "0.,4.ping,13.1700000000000;"
    # é is two UTF-8 bytes, 😀 four (and two UTF-16 units): each is one code point.
    assert encode("name", "José 😀") == "4.name,6.José 😀;"
    assert encode("nop") == "3.nop;"


def test_parse_round_trips_instructions_with_multibyte_characters() -> None:
    text = encode("clipboard", "日本語,;.", "") + encode("sync", "42", "1")
    parsed = InstructionParser().feed_instructions(text)
    assert parsed == [Instruction("clipboard", ("日本語,;.", "")), Instruction("sync", ("42", "1"))]
    assert Instruction.parse("4.name,6.José 😀;") == Instruction("name", ("José 😀",))


def test_split_reads_are_reassembled_at_any_cut() -> None:
    stream = encode("args", "VERSION_1_5_0", "hostname", "port") + encode("name", "Zoë 😀")
    expected = [
        Instruction("args", ("VERSION_1_5_0", "hostname", "port")),
        Instruction("name", ("Zoë 😀",)),
    ]
    for cut in range(len(stream) + 1):
        parser = InstructionParser()
        found = parser.feed_instructions(stream[:cut]) + parser.feed_instructions(stream[cut:])
        assert found == expected, cut
        assert parser.pending == 0
    parser = InstructionParser()
    found = []
    for character in stream:
        found += parser.feed_instructions(character)
    assert found == expected


def test_feed_returns_complete_instructions_verbatim_and_keeps_the_rest() -> None:
    parser = InstructionParser()
    first = encode("size", 0, 1024, 768)
    second = encode("sync", 5, 1)
    assert parser.feed(first + second[:4]) == first
    assert parser.pending == 4
    assert parser.feed(second[4:]) == second
    assert parser.feed("") == ""


def test_utf8_decoder_waits_for_a_split_character() -> None:
    data = encode("name", "😀é").encode()
    decoder = Utf8Decoder()
    parser = InstructionParser()
    found = []
    for index in range(len(data)):
        found += parser.feed_instructions(decoder.decode(data[index : index + 1]))
    assert found == [Instruction("name", ("😀é",))]
    with pytest.raises(ProtocolError) as raised:
        Utf8Decoder().decode(b"4.name,1.\xff;")
    assert raised.value.status is Status.CLIENT_BAD_REQUEST


@pytest.mark.parametrize(
    "text",
    [
        "4.syn;",  # the length says 4: ";" is content and the terminator is missing
        "x.sync;",
        "4.sync:",
        "4.sync,1.1.",
        "-1.a;",
        "٣.abc;",  # an Arabic-Indic digit is a digit to Python, not to guacd
        "3.abc;4.",
    ],
)
def test_malformed_input_is_a_bad_request(text: str) -> None:
    parser = InstructionParser()

    def feed_and_continue() -> None:
        parser.feed_instructions(text)
        parser.feed_instructions("xxxxxxxxxxxxxxxx;")

    with pytest.raises(ProtocolError) as raised:
        feed_and_continue()
    assert raised.value.status is Status.CLIENT_BAD_REQUEST
    with pytest.raises(ProtocolError):
        parser.feed_instructions("3.nop;")


def test_guacd_limits_are_an_overrun() -> None:
    at_limit = "a" * (MAX_LENGTH - 20)
    assert InstructionParser().feed_instructions(encode("blob", "1", at_limit))
    cases = [
        "123456.",  # six digits
        f"{MAX_LENGTH + 1}.",  # an element longer than 8192 before any of it arrives
        encode("blob", "1", "a" * MAX_LENGTH),  # the instruction as a whole
        "4.blob,1.1," + "4.aaaa," * (MAX_ELEMENTS - 1) + "1.a;",
    ]
    for text in cases:
        with pytest.raises(ProtocolError) as raised:
            InstructionParser().feed_instructions(text)
        assert raised.value.status is Status.CLIENT_OVERRUN, text[:20]
    # An incomplete instruction may not grow past the limit either.
    parser = InstructionParser()
    parser.feed_instructions("4.blob,1.1,8000." + "a" * 7000)
    with pytest.raises(ProtocolError):
        parser.feed_instructions("4.nop;" * 400)


def test_exactly_128_elements_are_accepted() -> None:
    text = encode("x", *(["a"] * (MAX_ELEMENTS - 1)))
    [instruction] = InstructionParser().feed_instructions(text)
    assert len(instruction.args) == MAX_ELEMENTS - 1


def test_an_empty_length_is_zero_as_in_guacd() -> None:
    assert InstructionParser().feed_instructions(".,4.ping;") == [Instruction("", ("ping",))]


def test_status_codes_and_their_websocket_close_codes() -> None:
    assert Status.UPSTREAM_TIMEOUT == 0x0202
    assert Status.UPSTREAM_ERROR == 0x0203
    assert Status.UPSTREAM_NOT_FOUND == 0x0207
    assert Status.CLIENT_UNAUTHORIZED.websocket_code == 1008
    assert Status.CLIENT_OVERRUN.websocket_code == 1009
    assert Status.CLIENT_BAD_REQUEST.websocket_code == 1002
    assert Status.SUCCESS.websocket_code == 1000
    assert Status.CLIENT_TOO_MANY.close_reason == "797"
    assert Status.from_code(0x0301) is Status.CLIENT_UNAUTHORIZED
    assert Status.from_code(0x0999) is None


def test_feed_agrees_with_full_parsing_at_every_cut() -> None:
    import random

    rng = random.Random(7)
    words = ["", "a", "é", "😀x", "12345678", "123456789", "x" * 40, "日本" * 600, ";,.", "1.2;"]
    stream = "".join(
        encode(rng.choice(["copy", "blob", "é"]), *rng.choices(words, k=rng.randrange(0, 12)))
        for _ in range(60)
    )
    expected = InstructionParser().feed_instructions(stream)
    for _ in range(40):
        cuts = sorted(rng.sample(range(1, len(stream)), 6))
        parser = InstructionParser()
        pieces = zip([0, *cuts], [*cuts, None], strict=True)
        text = "".join(parser.feed(stream[a:b]) for a, b in pieces)
        assert text == stream
        assert InstructionParser().feed_instructions(text) == expected


def test_the_fast_path_keeps_the_element_limit() -> None:
    assert InstructionParser().feed(encode("x", *(["a"] * 127))) == encode("x", *(["a"] * 127))
    with pytest.raises(ProtocolError) as raised:
        InstructionParser().feed(encode("x", *(["a"] * 128)))
    assert raised.value.status is Status.CLIENT_OVERRUN
    with pytest.raises(ProtocolError):
        InstructionParser().feed("3.nop;3.abc:")
