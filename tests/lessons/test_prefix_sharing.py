"""lessons.prefix_sharing: the shared prefix of made-up prompts, and the sentence about requests
that found more of theirs cached."""
import pytest

from lessons.prefix_sharing import common_prefix_length, finding_more_sentence, requests_finding_more


def test_the_common_prefix_is_what_every_prompt_begins_with():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 9], [1, 2, 7]]) == 2
    assert common_prefix_length([[5, 6], [5, 6, 7]]) == 2          # a prompt that is all prefix
    assert common_prefix_length([[1, 2], [3, 4]]) == 0
    assert common_prefix_length([[4, 4, 4]]) == 3
    with pytest.raises(ValueError):
        common_prefix_length([])


def test_requests_finding_more_than_the_common_whole_blocks():
    # a common prefix of 37 tokens is 2 whole blocks of 16: 32 tokens; finding 48 is more, 32 is not
    assert requests_finding_more([0, 32, 48, 32, 33], 37, 16) == [2, 4]
    assert requests_finding_more([0, 32, 32], 37, 16) == []


def test_no_request_found_more():
    assert finding_more_sentence([]) == "No request found more than that"


def test_one_request_found_more():
    assert finding_more_sentence([3]) == (
        "Request 3 found more than that: its question begins as an earlier one does, so the prompts agree "
        "for a further whole block. Prefix sharing knows nothing of system prompts, only of tokens")


def test_several_requests_found_more():
    assert finding_more_sentence([2, 4, 5]).startswith(
        "Requests 2, 4 and 5 found more than that: their questions begin as an earlier one does")
