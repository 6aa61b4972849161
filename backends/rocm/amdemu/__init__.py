"""The emulated AMD GPU platform: AMD code objects executed by an interpreter of AMD's
documented instruction semantics on the host. Nothing here runs on, or says anything
about, AMD hardware.
"""
