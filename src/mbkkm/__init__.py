"""mbkkm"""
