"""`mrclab paper`: the MRC paper's evaluation (arXiv 2605.04333, section 6), figure by figure.

figures.py holds what each figure of the paper showed, the runs that reproduce its shape on
this VM's fabric and how a result is judged against the claim; page.py turns finished runs into
each figure's folder (plot, CSV, summary) and the index page; command.py runs it all with
progress. A figure the testbed cannot express yet is listed with what it needs.
"""
