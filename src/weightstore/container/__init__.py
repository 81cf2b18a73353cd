"""The container kit: what every container format shares. The `ContainerFormat` record (every
fact about a format), the reader protocol and base, the writer base, lazy slices.
"""
