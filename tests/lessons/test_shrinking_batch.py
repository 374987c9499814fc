"""lessons.shrinking_batch: a decode step's time as sequences leave, in words, on made-up times."""
import pytest

from lessons.shrinking_batch import shrinking_batch_sentence


def test_the_time_falls_more_slowly_than_the_flops():
    # 6 sequences 12 ms, one 6 ms: 50% of the time for 20% of the FLOPs
    assert shrinking_batch_sentence(6, 0.012, 0.006, 0.20) == (
        "A step of 6 sequences took 12.00 ms here, a step of one 6.00 ms: 50% of the time for 20% of the "
        "FLOPs. The time falls more slowly than the FLOPs")


def test_the_time_falls_about_as_fast_as_the_flops():
    # 10 ms and 2.1 ms: 21% of the time for 20% of the FLOPs (21 / 20 = 1.05)
    assert shrinking_batch_sentence(6, 0.010, 0.0021, 0.20).endswith(
        "21% of the time for 20% of the FLOPs. The time falls about as fast as the FLOPs")


def test_a_time_falling_faster_than_the_flops_is_a_disturbed_measurement():
    # 10 ms and 1 ms: 10% of the time for 20% of the FLOPs
    assert shrinking_batch_sentence(4, 0.010, 0.001, 0.20) == (
        "A step of 4 sequences took 10.00 ms here, a step of one 1.00 ms: 10% of the time for 20% of the "
        "FLOPs. The time falls faster than the FLOPs (a measurement disturbed by other programs on this machine)")


def test_the_edges_of_agreement():
    assert shrinking_batch_sentence(2, 1.0, 0.95, 1.0).endswith("about as fast as the FLOPs")     # 0.95
    assert shrinking_batch_sentence(2, 1.0, 0.94, 1.0).endswith("(a measurement disturbed by other programs on this machine)")
    assert shrinking_batch_sentence(2, 1.0, 0.525, 0.5).endswith("about as fast as the FLOPs")    # 1.05
    assert shrinking_batch_sentence(2, 1.0, 0.53, 0.5).endswith("more slowly than the FLOPs")


@pytest.mark.parametrize("args", [(6, 0, 0.01, 0.2), (6, 0.01, 0, 0.2), (6, 0.01, 0.01, 0)])
def test_non_positive_figures_are_refused(args):
    with pytest.raises(ValueError, match="must be positive"):
        shrinking_batch_sentence(*args)


# one_row_sentence: where the time falls, on made-up times (seconds)

from lessons.shrinking_batch import one_row_sentence, path_price_words  # noqa: E402


def test_a_matrix_matrix_routine_dearer_than_two_matrix_vector_passes_is_named_its_price():
    # step 6 rows 140 ms, 2 rows 128 ms, 1 row 55 ms; products 96 ms at 2 rows, 28 ms at 1
    # 96 / (2 x 28) = 1.71; the products fell 68 ms of the step's 73 ms (93%)
    assert one_row_sentence(6, 0.140, 0.128, 0.055, 0.096, 0.028) == (
        "From 6 sequences down to 2 the step's time hardly moved (9% lower), and from 2 to 1 it fell by 57%. "
        "The step's matrix products alone took 96.0 ms with 2 rows and 28.0 ms with 1, 1.7 times what two "
        "one-row passes cost: the matrix-matrix routine's price. Their fall from 2 rows to 1, 68.0 ms, is "
        "93% of the step's (73.0 ms).")


def test_routines_that_cost_the_same_per_row_are_said_to():
    # 2 rows 20 ms, 1 row 10.5 ms: 20 / 21 = 0.95, within the noise
    assert path_price_words(0.020, 0.0105) == (
        "as much as two one-row passes (a ratio of 0.95): here the two routines cost the same per row")


def test_a_matrix_matrix_routine_cheaper_than_two_passes_is_said_to_share_its_reads():
    # 2 rows 12 ms, 1 row 10 ms: 12 / 20 = 0.6, 1.7 times less
    assert path_price_words(0.012, 0.010) == (
        "1.7 times less than two one-row passes: the matrix-matrix routine reads each weight once for both rows")


def test_the_edges_of_the_noise_for_the_routines():
    assert path_price_words(0.0230, 0.010).startswith("as much as")        # 1.15
    assert path_price_words(0.0232, 0.010).startswith("1.2 times what")    # 1.16
    assert path_price_words(0.0174, 0.010).startswith("as much as")        # 0.87 = 1 / 1.149
    assert path_price_words(0.0172, 0.010).startswith("1.2 times less")    # 0.86 = 1 / 1.163


def test_a_step_that_did_not_fall_at_one_row_is_said_not_to():
    words = one_row_sentence(6, 0.140, 0.100, 0.095, 0.050, 0.024)
    assert words.startswith("From 6 sequences down to 2 the step's time fell by 29%, and from 2 to 1 it "
                            "hardly moved (5% lower).")
    assert words.endswith("The step itself did not fall beyond the noise from 2 sequences to 1.")
    assert one_row_sentence(4, 0.10, 0.10, 0.20, 0.05, 0.02).endswith(
        "The step itself did not fall beyond the noise from 2 sequences to 1.")      # it rose: no fall


def test_products_that_did_not_fall_with_the_step_place_its_fall_elsewhere():
    assert one_row_sentence(6, 0.140, 0.128, 0.055, 0.020, 0.021).endswith(
        "The products did not fall with the step: its fall from 2 sequences to 1 is elsewhere.")


@pytest.mark.parametrize("args", [(6, 0, 0.1, 0.1, 0.1, 0.1), (6, 0.1, 0.1, -0.1, 0.1, 0.1),
                                  (6, 0.1, 0.1, 0.1, 0.1, 0.0)])
def test_the_where_sentence_refuses_non_positive_times(args):
    with pytest.raises(ValueError, match="must be positive"):
        one_row_sentence(*args)
