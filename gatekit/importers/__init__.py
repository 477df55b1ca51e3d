"""Other tools' results as series evidence, analysed exactly like a gate's own (`analysis.analyze`).

One module per tool reads its files into two `ImportedArm`s; `common.imported_evidence` turns them into the
evidence a gate's journal would give, so the policies, reports and CI outputs treat an import like any
finding. The finding says what the tool could not give (no interleaving, no load sampled) in its warnings.
"""
