"""The repository root, for tests that read or run files of the checkout."""

from recipe.files import REPO_ROOT

REPO = REPO_ROOT
