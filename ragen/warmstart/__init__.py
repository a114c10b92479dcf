"""warmstart"""
