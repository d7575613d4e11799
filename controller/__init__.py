"""Sandman's controller: informers, the bulk binder, leader election and garbage collection.

Not built yet (issue 5). Nothing here pretends to work: the package exists so the folder
layout and the import-linter contracts are in place from the start.
"""
