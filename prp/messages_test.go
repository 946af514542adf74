package prp
