"""The decision policies, one module each (classic, sequential, duet; comparison holds the rules only
`gate simulate` runs). What a policy is made of:

- its descriptor, in `gatekit.policy_descriptors` (stdlib only, so `gate --help` and the gate file's checks
  read it without pandas): name, mode, order, stages, default evidence, the sizes `gate plan` tries;
- its Policy object, in its own module (`gatekit.policies.base` states the protocol), found through the
  descriptor by `policy_descriptors.policy_for`: stated rules, classification, retries, extension, decision,
  planning, simulation, and the words the narrative and the terminal print.

Nothing outside this package compares policy names (tests/test_policies.py checks it). This file imports
nothing, so importing the package stays light.
"""
