"""ga2.study: the accuracy study against the published chapter's figures."""
import pytest

from ga2 import study
from published_figures import PUBLISHED_LENGTH_ERRORS, PUBLISHED_STAGE_ERRORS


@pytest.fixture(scope="module")
def stages_numpy():
    return study.stage_errors()


@pytest.fixture(scope="module")
def lengths_numpy():
    return study.length_errors()


def test_stage_names_are_the_published_ones():
    assert list(study.STAGES) == [name for name, _, _ in PUBLISHED_STAGE_ERRORS]


def test_stage_study_reproduces_the_published_table_exactly_with_its_generator():
    """The published chapter's own random draws (random.Random(seed).gauss) give its table to the last digit."""
    rows = study.stage_errors(generator="python")
    assert [(r.key, round(r.mean * 100, 2), round(r.worst * 100, 2)) for r in rows] == PUBLISHED_STAGE_ERRORS


def test_length_study_reproduces_the_published_table_exactly_with_its_generator():
    rows = study.length_errors(generator="python")
    assert {r.key: (round(r.mean * 100, 2), round(r.worst * 100, 2)) for r in rows} == PUBLISHED_LENGTH_ERRORS


def test_stage_study_means_are_close_to_the_published_ones_with_numpy_data(stages_numpy):
    # Across blocks of 60 examples the means move by about +-0.3 points; allow 0.45.
    for row, (name, published_mean, _) in zip(stages_numpy, PUBLISHED_STAGE_ERRORS):
        assert row.key == name
        assert abs(row.mean * 100 - published_mean) <= 0.45, (name, row.mean * 100, published_mean)


def test_stage_study_shape(stages_numpy):
    means = [r.mean for r in stages_numpy]
    assert means[0] == 0.0
    assert round(means[4], 4) == round(means[3], 4)      # the integer softmax adds nothing visible
    steps = [b - a for a, b in zip(means, means[1:])]
    assert steps[0] == max(steps)                        # int8 inputs and weights cost the most


def test_length_study_means_are_close_to_the_published_ones_with_numpy_data(lengths_numpy):
    # 30 examples per length: the means move by up to ~20% between blocks of seeds.
    for row in lengths_numpy:
        published_mean = PUBLISHED_LENGTH_ERRORS[row.key][0]
        assert abs(row.mean * 100 - published_mean) <= max(0.3, 0.2 * published_mean), (row.key, row.mean * 100, published_mean)
    means = [r.mean for r in lengths_numpy]
    assert means[0] < 0.015 and 0.035 < means[-1] < 0.06  # about 1% at L = 1, about 4.6% at L = 32
    assert all(r.worst < 0.12 for r in lengths_numpy)


def test_format_rows_prints_ours_beside_the_published_ones():
    text = study.format_rows([study.StudyRow(16, 0.033, 0.07)], {16: (3.30, 6.30)}, "L", 3)
    assert " 16    3.30%   7.00%       3.30%      6.30%" in text
