"""Domain content (retail, telecom): each <name>/domain.py defines make_domain. Loaded by
``pytest_quantagent.env.registry`` by path; a package here only so that lint-imports can
check "domains import only env, the vocabulary and errors"."""
